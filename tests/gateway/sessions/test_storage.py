"""Where events live: the ring, the SQLite store, eviction, TTL, restarts, batching."""

from __future__ import annotations

import asyncio

import orjson
from fastapi import APIRouter, Request

from gateway.api import Gateway, PrincipalDep
from gateway.app import create_app
from tests.support.bodies import stream_body
from tests.support.gateway import in_memory, running_gateway
from tests.support.servers import serve_uvicorn
from tests.support.sse_client import fresh_client, read_stream
from tests.support.waiting import until


async def in_server(app, make_coro):
    """Run ``make_coro()`` on the server's event loop (the app lives in uvicorn's thread)."""
    future = asyncio.run_coroutine_threadsafe(make_coro(), app.state.sessions.loop)
    return await asyncio.wrap_future(future)


async def test_memory_store_answers_410_for_events_that_left_the_ring(gateway):
    async with gateway(session_store="memory", session_ring_size=16) as (base, app), fresh_client(base) as client:
        full = await read_stream(client, "POST", "/v1/chat/completions", json=stream_body(100, session_id="ring-1"))
        gone = await client.get("/v1/sessions/ring-1/events", headers={"Last-Event-ID": "ring-1:3"})
        kept = await read_stream(client, "GET", "/v1/sessions/ring-1/events",
                                 headers={"Last-Event-ID": f"ring-1:{len(full.events) - 10}"})
    assert gone.status_code == 410
    assert gone.json()["error"]["code"] == "events_evicted"
    assert gone.json()["error"]["type"] == "invalid_request_error"  # (OpenAI's word for every 4xx but 401/403/429)
    assert [e.data for e in kept.events] == [e.data for e in full.events[-9:]]


async def test_sqlite_store_replays_events_the_ring_dropped(gateway):
    async with gateway(session_store="sqlite", session_ring_size=16) as (base, app), fresh_client(base) as client:
        full = await read_stream(client, "POST", "/v1/chat/completions", json=stream_body(100, session_id="ring-2"))
        old = await read_stream(client, "GET", "/v1/sessions/ring-2/events", headers={"Last-Event-ID": "ring-2:3"})
    assert [e.data for e in old.events] == [e.data for e in full.events[4:]]


async def test_finished_sessions_survive_a_restart_with_sqlite(make_session_settings):
    settings = make_session_settings(session_store="sqlite")
    async with running_gateway(settings) as (base, app), fresh_client(base) as client:
        full = await read_stream(client, "POST", "/v1/chat/completions", json=stream_body(20, session_id="persist-1"))
    async with running_gateway(settings) as (base, app), fresh_client(base) as client:
        replay = await read_stream(client, "GET", "/v1/sessions/persist-1/events", headers={"Last-Event-ID": "persist-1:9"})
    assert [e.data for e in replay.events] == [e.data for e in full.events[10:]]
    assert replay.dones == 1


async def test_shutdown_mid_stream_persists_an_explicit_end(make_session_settings, fake_engine):
    fake_engine.chunk_delay = 0.02
    settings = make_session_settings(session_store="sqlite")
    async with running_gateway(settings) as (base, app), fresh_client(base) as client:
        seen = await read_stream(client, "POST", "/v1/chat/completions", json=stream_body(1000, session_id="cut-1"), stop_after=10)
    async with running_gateway(settings) as (base, app), fresh_client(base) as client:
        replay = await read_stream(client, "GET", "/v1/sessions/cut-1/events")
    assert [e.data for e in replay.events[:10]] == [e.data for e in seen.events]
    assert replay.indices == list(range(len(replay.events)))
    assert replay.events[-2].json["error"]["code"] == "gateway_shutdown"
    assert replay.events[-1].done and replay.dones == 1


async def test_a_session_whose_producer_died_ends_with_an_error_on_resume(make_session_settings):
    """A producer that vanished without writing an ending (a crash): its lease runs out."""
    from gateway.sessions.frames import frame, id_prefix, pack_frames
    from gateway.sessions.store.base import Batch, Chunk, NewGeneration
    from gateway.sessions.store.sqlite import SQLiteStore

    settings = make_session_settings(session_store="sqlite", session_lease_seconds=0.5)
    dead = SQLiteStore(settings.database_url, replica="crashed-replica", lease_seconds=0.5, poll_interval=0.05)
    await dead.open()
    prefix = id_prefix("crash-1")
    frames = [frame(prefix, i, b"data: " + orjson.dumps({"choices": [{"index": 0, "delta": {"content": f"w{i}"}}]}))
              for i in range(5)]
    await dead.write(Batch(generations=[NewGeneration("local", "crash-1", 42, True)],
                           chunks=[Chunk(42, 0, 4, pack_frames(frames))]))
    await dead.close()  # no more heartbeats, no ending: as if killed
    async with running_gateway(settings) as (base, app), fresh_client(base) as client:
        replay = await read_stream(client, "GET", "/v1/sessions/crash-1/events", timeout=10)
        state = (await client.get("/v1/sessions/crash-1")).json()
    assert [e.data.encode() for e in replay.events[:5]] == [f.split(b"\ndata: ", 1)[1][:-2].join([b"data: ", b""])[6:] for f in frames]
    assert replay.events[5].json["error"]["code"] == "producer_lost"
    assert replay.events[6].done and replay.indices == list(range(7))
    assert state["status"] == "ended" and state["how"] == "error"


async def test_writes_are_batched_not_one_commit_per_event(gateway, fake_engine):
    fake_engine.chunk_delay = 0.002
    async with gateway(session_store="sqlite", session_flush_interval=0.05) as (base, app):
        store = app.state.sessions.store
        before = store.commits
        clients = [fresh_client(base) for _ in range(10)]
        try:
            results = await asyncio.gather(*(
                read_stream(c, "POST", "/v1/chat/completions", json=stream_body(100, session_id=f"batch-{i}"))
                for i, c in enumerate(clients)))
        finally:
            for c in clients:
                await c.aclose()
        await until(lambda: in_memory(app) == 0)  # all persisted, then evicted
        commits = store.commits - before
    events = sum(len(r.events) for r in results)
    assert events == 10 * 102
    # 10 claims + a flush every 50 ms of a ~0.3 s run; one commit per event would be > 1000.
    assert commits < 60, commits


async def test_gc_drops_expired_finished_sessions_but_never_a_live_one(gateway, fake_engine):
    fake_engine.chunk_delay = 0.02
    async with gateway(session_store="sqlite", sessions_ttl_seconds=0.2) as (base, app), fresh_client(base) as client:
        await read_stream(client, "POST", "/v1/chat/completions", json=stream_body(2, session_id="old-1"))
        live = asyncio.create_task(read_stream(client, "POST", "/v1/chat/completions", json=stream_body(100, session_id="live-1")))
        await until(lambda: (s := app.state.sessions.local("local", "live-1")) is not None and s.log.next_index > 2)
        await asyncio.sleep(0.3)  # let the TTL pass (the clock is what is tested here, not a synchronisation)
        await in_server(app, app.state.sessions.collect_garbage)
        old = await client.get("/v1/sessions/old-1")
        still = await client.get("/v1/sessions/live-1")
        done = await live
    assert old.status_code == 404
    assert still.status_code == 200 and still.json()["status"] == "live"
    assert done.dones == 1 and done.events[-2].json["choices"][0]["finish_reason"] == "length"


async def test_memory_stays_bounded_under_many_sessions(gateway):
    async with gateway(session_store="memory", session_memory_max_finished=5) as (base, app), fresh_client(base) as client:
        for i in range(20):
            await read_stream(client, "POST", "/v1/chat/completions", json=stream_body(2, session_id=f"many-{i}"))
        kept = in_memory(app)
        oldest = await client.get("/v1/sessions/many-0")
        newest = await client.get("/v1/sessions/many-19")
    assert kept == 5
    assert oldest.status_code == 404 and newest.status_code == 200
    async with gateway(session_store="sqlite") as (base, app), fresh_client(base) as client:
        for i in range(20):
            await read_stream(client, "POST", "/v1/chat/completions", json=stream_body(2, session_id=f"many-{i}"))
        await until(lambda: in_memory(app) == 0)
        oldest = await client.get("/v1/sessions/many-0")
    assert oldest.status_code == 200 and oldest.json()["status"] == "ended"


async def test_usage_is_counted_per_key_even_for_aborted_streams(gateway, fake_engine):
    fake_engine.chunk_delay = 0.02
    async with gateway() as (base, app), fresh_client(base) as client:
        await read_stream(client, "POST", "/v1/chat/completions", json=stream_body(7))
        await read_stream(client, "POST", "/v1/chat/completions", json=stream_body(1000), stop_after=5)
        metrics = app.state.gateway.metrics
        await until(lambda: metrics.streams_ended.labels("client_disconnect")._value.get() == 1)
        completion = metrics.tokens.labels("local", "completion")._value.get()
        prompt = metrics.tokens.labels("local", "prompt")._value.get()
        completed = metrics.streams_ended.labels("completed")._value.get()
    assert completed == 1
    assert prompt == 5  # the engine's usage chunk of the completed stream
    assert completion >= 7 + 4  # 7 reported + at least the 4 tokens seen before the abort (estimated)


async def test_completion_hook_runs_once_from_the_producer_with_the_text(make_session_settings, fake_engine):
    fake_engine.chunk_delay = 0.01
    results = []

    async def remember(result):
        results.append(result)

    class Probe:
        """A feature that streams a chat completion through the public gateway API."""

        name, settings = "probe", None

        def __init__(self, gateway: Gateway) -> None:
            self.router = APIRouter()

            @self.router.post("/test/chat")
            async def test_chat(request: Request, _: PrincipalDep):
                return await gateway.stream_chat_completion(
                    request, {"model": "fake-model", "max_tokens": 30, "messages": [{"role": "user", "content": "x"}]},
                    session_id="hook-1", on_complete=remember)

        async def start(self) -> None: ...
        async def stop(self) -> None: ...
        def status(self) -> dict:
            return {"ready": True}

    app = create_app(make_session_settings(), features={"probe": Probe})

    async with serve_uvicorn(app) as base, fresh_client(base) as client:
        got = await read_stream(client, "POST", "/test/chat", stop_after=3)  # the client leaves early
        assert got.status == 200, got.body
        await until(lambda: len(results) == 1)
        # Once the generation has left memory (ended, persisted, nobody following) nothing can call
        # the hook again: then it must still have run once.
        await until(lambda: in_memory(app) == 0)
    assert len(results) == 1
    assert results[0].how == "completed" and results[0].text == "".join(f"t{i} " for i in range(30))


async def test_a_generation_another_replica_ended_is_fenced_off_and_stopped_here(gateway, fake_engine):
    """A replica wrongly taken for dead (a stalled heartbeat) must not keep writing after the takeover."""
    from gateway.protocols.openai.dialect import OPENAI
    from gateway.sessions.frames import frames, id_prefix
    from gateway.sessions.store.sqlite import SQLiteStore

    fake_engine.chunk_delay = 0.02
    async with gateway(session_store="sqlite", session_lease_seconds=60) as (base, app), fresh_client(base) as client:
        manager = app.state.sessions
        reading = asyncio.create_task(read_stream(client, "POST", "/v1/chat/completions",
                                                  json=stream_body(1000, session_id="fence-1")))
        await until(lambda: (s := manager.local("local", "fence-1")) is not None and s.stored and s.log.persisted > 5)
        session = manager.local("local", "fence-1")
        other = SQLiteStore(app.state.gateway.settings.effective_sessions_database_url, replica="other",
                            lease_seconds=60, poll_interval=0.05)
        await other.open()
        try:
            await other._writer.execute("UPDATE stream_replicas SET heartbeat_at = 0 WHERE replica = ?",
                                        (manager.replica,))  # as if its heartbeat had stalled
            ended = await other.end_orphan(session.gen_id, lambda sid, i: (
                "error", frames(id_prefix(sid), i, OPENAI.error_events("taken over", "producer_lost"))))
            got = await reading
            stored = await other.read_frames(session.gen_id, 0, max_chunks=10_000)
        finally:
            await other.close()
    assert ended
    assert fake_engine.stream_aborted.is_set()  # the generation stopped here too
    assert got.events[-2].json["error"]["code"] == "producer_lost" and got.dones == 1
    # The store holds the takeover's ending last: nothing written after it by the fenced producer.
    assert stored[-1].endswith(b"data: [DONE]\n\n") and b"taken over" in stored[-2]
    assert [int(f.split(b"\n", 1)[0].rpartition(b":")[2]) for f in stored] == list(range(len(stored)))


async def test_a_failing_store_is_a_503_never_a_500(gateway):
    async with gateway(session_store="sqlite") as (base, app), fresh_client(base) as client:
        store = app.state.sessions.store
        await in_server(app, store._reader.close)  # the database became unreadable
        resume = await client.get("/v1/sessions/somewhere/events")
        cancel = await client.post("/v1/cancel/somewhere")
    for response in (resume, cancel):
        assert response.status_code == 503
        assert response.json()["error"]["code"] == "session_store_unavailable"


async def test_a_client_ahead_of_the_store_gets_an_explicit_ending_at_an_id_it_has_not_seen(make_session_settings):
    """The producer died before persisting events its client had already received (its last batch)."""
    from gateway.sessions.frames import frame, id_prefix, pack_frames
    from gateway.sessions.store.base import Batch, Chunk, NewGeneration
    from gateway.sessions.store.sqlite import SQLiteStore

    settings = make_session_settings(session_store="sqlite", session_lease_seconds=0.5)
    dead = SQLiteStore(settings.database_url, replica="crashed-replica", lease_seconds=0.5, poll_interval=0.05)
    await dead.open()
    prefix = id_prefix("ahead-1")
    frames = [frame(prefix, i, b'data: {"choices":[{"index":0,"delta":{"content":"w%d"}}]}' % i) for i in range(5)]
    await dead.write(Batch(generations=[NewGeneration("local", "ahead-1", 43, True)],
                           chunks=[Chunk(43, 0, 4, pack_frames(frames))]))
    await dead.close()  # killed: its client had received events 0..9, the store holds 0..4
    async with running_gateway(settings) as (base, app), fresh_client(base) as client:
        ahead = await read_stream(client, "GET", "/v1/sessions/ahead-1/events",
                                  headers={"Last-Event-ID": "ahead-1:9"}, timeout=10)
        behind = await read_stream(client, "GET", "/v1/sessions/ahead-1/events",
                                   headers={"Last-Event-ID": "ahead-1:2"}, timeout=10)
    assert ahead.status == 200
    assert ahead.indices == [10, 11]  # ids it has not seen, never one it holds with other content
    assert ahead.events[0].json["error"]["code"] == "producer_lost" and ahead.events[1].done
    # What was lost, counted from the dead producer's own events (0..4), not the ending written for it.
    assert "events from index 5 on were never persisted" in ahead.events[0].json["error"]["message"]
    # A client behind the store still gets what was stored, then the stored ending.
    assert behind.indices == [3, 4, 5, 6] and behind.events[2].json["error"]["code"] == "producer_lost"


async def dead_replicas_session(settings, session_id: str, gen_id: int, dialect: str, events: list[bytes]) -> None:
    """A live session of a replica that died (its heartbeat put in the past), written once the gateway
    under test runs: its first sweep for dead producers is behind it, the next a minute away."""
    import sqlite3

    from gateway.sessions.frames import frame, id_prefix, pack_frames
    from gateway.sessions.store.base import Batch, Chunk, NewGeneration
    from gateway.sessions.store.sqlite import SQLiteStore

    dead = SQLiteStore(settings.database_url, replica="dead-replica", lease_seconds=5, poll_interval=0.05)
    await dead.open()
    framed = [frame(id_prefix(session_id), i, event) for i, event in enumerate(events)]
    await dead.write(Batch(generations=[NewGeneration("local", session_id, gen_id, True, dialect=dialect)],
                           chunks=[Chunk(gen_id, 0, len(events) - 1, pack_frames(framed))]))
    await dead.close()
    database = sqlite3.connect(settings.database_url.split(":///", 1)[1], timeout=30)
    with database:
        database.execute("UPDATE stream_replicas SET heartbeat_at = 0 WHERE replica = 'dead-replica'")
    database.close()


def sse_event(kind: str, data: dict) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **data})


async def test_a_dead_replicas_messages_session_cancelled_here_reports_the_tokens_it_generated(make_session_settings):
    """A session produced by a replica that died, cancelled on this one: its ending is written here, from
    the store. Its ``message_delta`` said ``output_tokens: 0`` although the stored events hold 6 generated
    tokens; the producing replica's own cancelled ending counts them (one per delta, as it relays them)."""
    settings = make_session_settings(session_store="sqlite", session_lease_seconds=5)
    events = [sse_event("message_start", {"message": {
                  "id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "fake-model",
                  "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 9, "output_tokens": 0}}}),
              sse_event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})]
    events += [sse_event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": f"w{i} "}})
               for i in range(6)]
    async with running_gateway(settings) as (base, app), fresh_client(base) as client:
        await dead_replicas_session(settings, "gone-1", 44, "anthropic", events)
        cancel = await client.post("/v1/cancel/gone-1")
        replay = await read_stream(client, "GET", "/v1/sessions/gone-1/events", timeout=10)
    assert cancel.json()["cancelled"] is True, cancel.json()
    ending = [event.json for event in replay.events[len(events):]]
    assert [data["type"] for data in ending] == ["message_delta", "message_stop"]
    assert ending[0]["delta"]["stop_reason"] == "cancelled" and ending[0]["usage"]["output_tokens"] == 6, ending


async def test_a_dead_replicas_responses_stream_cancelled_here_ends_with_its_response_and_closed_items(
        make_session_settings):
    """The same for a Responses stream: its ``response.cancelled`` carried a bare object (no model, no
    ``created_at``, no output) where the producing replica's carries the response and the items the
    stream closed."""
    settings = make_session_settings(session_store="sqlite", session_lease_seconds=5)
    response = {"id": "resp_gone", "object": "response", "created_at": 1700000000, "model": "fake-model",
                "status": "in_progress", "output": [], "usage": None}
    first = {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": "a b ", "annotations": []}]}
    events = [sse_event("response.created", {"response": response, "sequence_number": 0}),
              sse_event("response.in_progress", {"response": response, "sequence_number": 1}),
              sse_event("response.output_item.added", {"output_index": 0, "sequence_number": 2,
                                                       "item": {**first, "status": "in_progress", "content": []}}),
              sse_event("response.output_text.delta", {"output_index": 0, "delta": "a ", "sequence_number": 3}),
              sse_event("response.output_text.delta", {"output_index": 0, "delta": "b ", "sequence_number": 4}),
              sse_event("response.output_item.done", {"output_index": 0, "item": first, "sequence_number": 5}),
              sse_event("response.output_item.added", {"output_index": 1, "sequence_number": 6, "item": {
                  "id": "msg_2", "type": "message", "status": "in_progress", "content": []}}),
              sse_event("response.output_text.delta", {"output_index": 1, "delta": "c ", "sequence_number": 7})]
    async with running_gateway(settings) as (base, app), fresh_client(base) as client:
        await dead_replicas_session(settings, "resp_gone", 45, "responses", events)
        cancel = await client.post("/v1/cancel/resp_gone")
        replay = await read_stream(client, "GET", "/v1/sessions/resp_gone/events", timeout=10)
    assert cancel.json()["cancelled"] is True, cancel.json()
    ending = [event.json for event in replay.events[len(events):]]
    assert [(data["type"], data["sequence_number"]) for data in ending] == [("response.cancelled", 8)]
    assert ending[0]["response"] == {**response, "status": "cancelled", "output": [first]}
