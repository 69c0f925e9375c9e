"""Generation outlives clients: disconnect policy, cancel, many followers, ownership."""

from __future__ import annotations

import asyncio

import pytest

from tests.support.bodies import stream_body
from tests.support.gateway import OTHER_KEY, READ_KEY, bearer, in_memory
from tests.support.sse_client import content_of, fresh_client, read_stream
from tests.support.waiting import until


async def test_unnamed_stream_aborts_upstream_as_soon_as_its_client_leaves(gateway, fake_engine):
    fake_engine.chunk_delay = 0.02
    async with gateway(cancel_after_disconnect_seconds=60) as (base, app), fresh_client(base) as client:
        got = await read_stream(client, "POST", "/v1/chat/completions", json=stream_body(500), stop_after=3)
        await asyncio.wait_for(fake_engine.stream_aborted.wait(), 30)
        sid = got.session_id
        # What was produced stays replayable, and ends with an explicit cancelled chunk.
        await until(lambda: not app.state.sessions.local("local", sid) or not app.state.sessions.local("local", sid).live)
        replay = await read_stream(client, "GET", f"/v1/sessions/{sid}/events")
    assert replay.events[-2].json["choices"][0]["finish_reason"] == "cancelled"
    assert replay.events[-2].json["cancel_reason"] == "client_disconnected"  # not disconnect_timeout (60 s)
    assert replay.dones == 1 and replay.indices == list(range(len(replay.events)))
    assert len(replay.events) < 250  # 500 asked, 20 ms apart: stopped when its client left, not run out


async def test_named_session_survives_a_disconnect_and_resumes_where_it_left(gateway, fake_engine):
    fake_engine.chunk_delay = 0.01
    async with gateway(cancel_after_disconnect_seconds=30) as (base, app), fresh_client(base) as client:
        first = await read_stream(client, "POST", "/v1/chat/completions", json=stream_body(60, session_id="keep-1"), stop_after=5)
        rest = await read_stream(client, "POST", "/v1/chat/completions", json=stream_body(60, session_id="keep-1"),
                                 headers={"Last-Event-ID": first.last_id})
    events = first.events + rest.events
    assert fake_engine.streams_aborted == 0
    assert [e.index for e in events] == list(range(len(events)))
    assert content_of(events) == "".join(f"t{i} " for i in range(60))
    assert rest.dones == 1


async def test_named_session_left_alone_is_cancelled_after_the_grace_period(gateway, fake_engine):
    fake_engine.chunk_delay = 0.02
    async with gateway(cancel_after_disconnect_seconds=0.3) as (base, app), fresh_client(base) as client:
        loop = asyncio.get_running_loop()
        await read_stream(client, "POST", "/v1/chat/completions", json=stream_body(1000, session_id="alone-1"), stop_after=2)
        left = loop.time()
        await asyncio.wait_for(fake_engine.stream_aborted.wait(), 15)
        waited = loop.time() - left
        replay = await read_stream(client, "GET", "/v1/sessions/alone-1/events")
    assert waited >= 0.25  # its grace period first (a timer may fire late on a busy machine, never early)
    assert replay.events[-2].json["cancel_reason"] == "disconnect_timeout"
    assert len(replay.events) < 500  # 1000 asked, 20 ms apart: cancelled, not run out


async def left_alone_while_the_store_answers(gateway, fake_engine, monkeypatch, session_id: str, *,
                                            lease: float, has_listener):
    """A named session whose only client leaves (grace 0.1 s) while ``has_listener(app, gen_id)``
    stands in for the store's answer; its replay once the engine request was closed."""
    fake_engine.chunk_delay = 0.02
    async with gateway(cancel_after_disconnect_seconds=0.1, session_lease_seconds=lease) as (base, app), \
            fresh_client(base) as client:
        async def answer(gen_id: int) -> bool:
            return await has_listener(app, gen_id)

        monkeypatch.setattr(app.state.sessions.store.target, "has_listener", answer)
        await read_stream(client, "POST", "/v1/chat/completions", json=stream_body(100_000, session_id=session_id),
                          stop_after=2)
        await asyncio.wait_for(fake_engine.stream_aborted.wait(), 30)  # bounded: never generating for nobody forever
        return await read_stream(client, "GET", f"/v1/sessions/{session_id}/events")


async def test_a_store_that_cannot_say_who_follows_does_not_stop_a_named_session(gateway, fake_engine, monkeypatch):
    # A follower on another replica renews its lease through the store: a store that times out is
    # no proof that nobody follows. The generation lives while the store fails (for up to a lease,
    # 3 s here, checked every second) and stops once the store answers that nobody follows.
    seen_live: list[bool] = []

    async def has_listener(app, gen_id: int) -> bool:
        seen_live.append(app.state.sessions.local("local", "unsure-1").live)
        if len(seen_live) <= 2:
            raise TimeoutError("the store did not answer in time")
        return False

    replay = await left_alone_while_the_store_answers(gateway, fake_engine, monkeypatch, "unsure-1", lease=3,
                                                      has_listener=has_listener)
    assert seen_live == [True, True, True]  # two failed checks went by without stopping it; the answer did
    assert replay.events[-2].json["cancel_reason"] == "disconnect_timeout"


async def test_a_store_failing_for_longer_than_a_lease_stops_a_named_session_all_the_same(gateway, fake_engine,
                                                                                       monkeypatch):
    checks: list[int] = []

    async def has_listener(app, gen_id: int) -> bool:
        checks.append(gen_id)
        raise TimeoutError("the store is down")

    replay = await left_alone_while_the_store_answers(gateway, fake_engine, monkeypatch, "down-1", lease=0.6,
                                                      has_listener=has_listener)
    assert len(checks) >= 2  # asked again before giving up
    assert replay.events[-2].json["cancel_reason"] == "disconnect_timeout"


async def test_cancel_ends_every_follower_aborts_upstream_and_frees_the_session(gateway, fake_engine):
    fake_engine.chunk_delay = 0.02
    async with gateway() as (base, app), fresh_client(base) as c1, fresh_client(base) as c2:
        owner = asyncio.create_task(read_stream(c1, "POST", "/v1/chat/completions", json=stream_body(1000, session_id="stop-1")))
        await until(lambda: (s := app.state.sessions.local("local", "stop-1")) is not None and s.log.next_index > 3)
        follower = asyncio.create_task(read_stream(c2, "GET", "/v1/sessions/stop-1/events"))
        await until(lambda: app.state.sessions.local("local", "stop-1").consumers == 2)
        cancel = await c1.post("/v1/cancel/stop-1")
        a, b = await owner, await follower
        assert fake_engine.stream_aborted.is_set()
        again = await c1.post("/v1/cancel/stop-1")
        reused = await read_stream(c1, "POST", "/v1/chat/completions", json=stream_body(3, session_id="stop-1"))
    assert cancel.status_code == 200 and cancel.json()["cancelled"] is True and cancel.json()["status"] == "cancelled"
    for got in (a, b):
        assert got.events[-2].json["choices"][0]["finish_reason"] == "cancelled"
        assert got.events[-2].json["cancel_reason"] == "cancel_request"
        assert got.events[-1].done and got.dones == 1
    assert [e.data for e in a.events] == [e.data for e in b.events]  # the follower replayed, then followed
    assert again.json()["cancelled"] is False
    assert reused.status == 200 and reused.indices == list(range(5)) and reused.dones == 1


async def test_followers_of_one_session_receive_identical_events(gateway, fake_engine):
    fake_engine.chunk_delay = 0.005
    async with gateway() as (base, app):
        clients = [fresh_client(base) for _ in range(4)]
        try:
            first = asyncio.create_task(read_stream(clients[0], "POST", "/v1/chat/completions",
                                                    json=stream_body(80, session_id="fan-1")))
            await until(lambda: app.state.sessions.local("local", "fan-1") is not None)
            others = [asyncio.create_task(read_stream(c, "GET", "/v1/sessions/fan-1/events")) for c in clients[1:]]
            results = [await first] + [await task for task in others]
        finally:
            for c in clients:
                await c.aclose()
    reference = [e.data for e in results[0].events]
    assert len(reference) == 1 + 80 + 1
    for got in results:
        assert [e.data for e in got.events] == reference


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_only_the_creating_key_can_resume_cancel_or_see_a_session(gateway, fake_engine, store):
    fake_engine.chunk_delay = 0.01
    async with gateway(session_store=store, api_keys=[READ_KEY, OTHER_KEY]) as (base, app), fresh_client(base) as client:
        mine = asyncio.create_task(read_stream(client, "POST", "/v1/chat/completions",
                                               json=stream_body(100, session_id="private-1"), headers=bearer(READ_KEY)))
        await until(lambda: in_memory(app) > 0)
        resume = await client.get("/v1/sessions/private-1/events", headers=bearer(OTHER_KEY))
        post_resume = await client.post("/v1/chat/completions", json=stream_body(2),
                                         headers={**bearer(OTHER_KEY), "Last-Event-ID": "private-1:0"})
        cancel = await client.post("/v1/cancel/private-1", headers=bearer(OTHER_KEY))
        state = await client.get("/v1/sessions/private-1", headers=bearer(OTHER_KEY))
        # The same name under another key is another session: no conflict, no crosstalk.
        theirs = await read_stream(client, "POST", "/v1/chat/completions", json=stream_body(2, session_id="private-1"),
                                   headers=bearer(OTHER_KEY))
        done = await mine
    for response in (resume, post_resume, cancel, state):
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "session_not_found"
    assert theirs.status == 200 and theirs.dones == 1 and len(theirs.events) == 4
    assert done.dones == 1 and done.events[-2].json["choices"][0]["finish_reason"] == "length"


async def test_a_detached_generation_runs_for_nobody_and_can_be_followed(gateway, fake_engine):
    """What a background run uses: produced by its own task, never stopped for lack of clients."""
    import orjson

    from gateway.http.auth import LOCAL_PRINCIPAL
    from gateway.http.context import RequestContext
    from gateway.protocols.openai.dialect import OPENAI
    from gateway.relay.call import StreamCall
    from tests.gateway.sessions.test_storage import in_server

    fake_engine.chunk_delay = 0.01
    results = []

    async def remember(result):
        results.append(result)

    async with gateway() as (base, app), fresh_client(base) as client:
        body = orjson.dumps({**stream_body(30), "stream_options": {"include_usage": True}})
        call = StreamCall(path="/v1/chat/completions", body=body, dialect=OPENAI, session_id="bg-1",
                          model="fake-model", on_complete=remember)
        request = RequestContext("req-bg-1", principal=LOCAL_PRINCIPAL)  # no client: nobody to answer

        async def start():
            await app.state.sessions.start_detached(call, request)

        await in_server(app, start)
        followed = await read_stream(client, "GET", "/v1/sessions/bg-1/events")
        await until(lambda: len(results) == 1)
    assert followed.dones == 1 and followed.indices == list(range(len(followed.events)))
    assert content_of(followed.events) == "".join(f"t{i} " for i in range(30))
    assert results[0].how == "completed" and not fake_engine.stream_aborted.is_set()
