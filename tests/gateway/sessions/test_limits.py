"""Bounded sessions: generations count against the caps until they end; a store outage cannot grow memory."""

from __future__ import annotations

import asyncio
import logging

import pytest

from tests.gateway.sessions.test_storage import in_server
from tests.support.bodies import stream_body as chat
from tests.support.gateway import OTHER_KEY, READ_KEY, bearer, in_memory
from tests.support.sse_client import fresh_client, parse_sse, read_stream
from tests.support.waiting import until


async def test_named_sessions_left_by_their_clients_still_count_against_the_per_key_cap(gateway, fake_engine):
    """One key opens named streams and drops each after its first event: the generations go on, and count."""
    fake_engine.chunk_delay = 0.02
    async with gateway(max_inflight_per_key=4, cancel_after_disconnect_seconds=30, flow_control=False) as (base, app), \
            fresh_client(base) as client:
        answers = []
        for i in range(8):
            got = await read_stream(client, "POST", "/v1/chat/completions", json=chat(2000, session_id=f"drop-{i}"),
                                    stop_after=1)
            answers.append(got)
        refused = answers[4:]
        for i in range(4):
            await client.post(f"/v1/cancel/drop-{i}")
    assert [a.status for a in answers[:4]] == [200] * 4
    assert all(a.status == 429 for a in refused), [a.status for a in refused]
    assert all(a.headers.get("retry-after") for a in refused)
    assert fake_engine.most_streams_active == 4  # never more generations than the key may have


async def test_the_live_session_cap_answers_429_until_one_ends(gateway, fake_engine):
    fake_engine.chunk_delay = 0.02
    async with gateway(max_live_sessions_per_key=2, cancel_after_disconnect_seconds=30) as (base, app), \
            fresh_client(base) as client:
        for i in range(2):
            await read_stream(client, "POST", "/v1/chat/completions", json=chat(2000, session_id=f"live-{i}"),
                              stop_after=1)
        third = await client.post("/v1/chat/completions", json=chat(2, session_id="live-2"))
        await client.post("/v1/cancel/live-0")
        fourth = await read_stream(client, "POST", "/v1/chat/completions", json=chat(2, session_id="live-3"))
        await client.post("/v1/cancel/live-1")
    assert third.status_code == 429 and third.json()["error"]["code"] == "too_many_sessions"
    assert third.headers["retry-after"] == "1"
    assert fourth.status == 200 and fourth.dones == 1


async def test_a_store_outage_refuses_new_streams_instead_of_growing_memory_and_recovers(gateway, fake_engine, caplog):
    fake_engine.chunk_delay = 0.005
    async with gateway(session_store="sqlite", session_max_unpersisted_bytes=4096) as (base, app), \
            fresh_client(base) as client:
        store = app.state.sessions.store
        real_write = store.write
        failures = []

        async def failing_write(batch):
            failures.append(batch)
            raise OSError("disk I/O error")

        store.write = failing_write
        with caplog.at_level(logging.WARNING, logger="gateway.sessions"):
            during = await read_stream(client, "POST", "/v1/chat/completions", json=chat(200, session_id="out-1"))
            writer = app.state.sessions.persistence.writer
            await until(lambda: len(failures) >= 3 and writer.backlog_bytes > 4096)
            refused = await client.post("/v1/chat/completions", json=chat(2, session_id="out-2"))
        store.write = real_write
        await until(lambda: writer.backlog_bytes == 0)
        after = await read_stream(client, "POST", "/v1/chat/completions", json=chat(2, session_id="out-3"))
        replay = await read_stream(client, "GET", "/v1/sessions/out-1/events")
    assert during.status == 200 and during.dones == 1  # the stream that was running lost nothing
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "session_store_unavailable"
    failed = [r for r in caplog.records if r.getMessage().startswith("session store write") and r.levelno >= 40]
    assert len(failed) == 1 and len(failures) >= 3  # one traceback for the outage, not one per retry
    assert any(r.getMessage() == "session store writes recovered" for r in caplog.records)
    assert after.status == 200 and after.dones == 1
    assert [e.data for e in replay.events] == [e.data for e in during.events]  # persisted once the store came back


async def test_a_failing_store_is_logged_once_not_once_per_refused_request(gateway, fake_engine, caplog):
    """Under an outage every named stream is refused (its claim needs the store): one traceback, then a recovery line."""
    async with gateway(session_store="sqlite") as (base, app), fresh_client(base) as client:
        store = app.state.sessions.store
        real_claim = store.claim

        async def failing_claim(generation):
            raise OSError("database is locked")

        store.claim = failing_claim
        with caplog.at_level(logging.WARNING, logger="gateway.sessions"):
            refused = [await client.post("/v1/chat/completions", json=chat(2, session_id=f"claim-{i}")) for i in range(5)]
            store.claim = real_claim
            after = await read_stream(client, "POST", "/v1/chat/completions", json=chat(2, session_id="claim-ok"))
    assert [r.status_code for r in refused] == [503] * 5
    assert {r.json()["error"]["code"] for r in refused} == {"session_store_unavailable"}
    unavailable = [r for r in caplog.records if r.getMessage() == "session store unavailable"]
    assert len(unavailable) == 1 and unavailable[0].exc_info is not None
    back = [r for r in caplog.records if r.getMessage() == "session store available again"]
    assert len(back) == 1 and back[0].requests_refused == 5
    assert after.status == 200 and after.dones == 1


async def test_the_memory_store_keeps_finished_sessions_per_key(gateway, fake_engine):
    async with gateway(session_store="memory", session_memory_max_finished=3, api_keys=[READ_KEY, OTHER_KEY]) \
            as (base, app), fresh_client(base) as client:
        await read_stream(client, "POST", "/v1/chat/completions", json=chat(2, session_id="mine"),
                          headers=bearer(READ_KEY))
        for i in range(10):  # another key makes many sessions
            await read_stream(client, "POST", "/v1/chat/completions", json=chat(2, session_id=f"theirs-{i}"),
                              headers=bearer(OTHER_KEY))
        mine = await client.get("/v1/sessions/mine", headers=bearer(READ_KEY))
        their_oldest = await client.get("/v1/sessions/theirs-0", headers=bearer(OTHER_KEY))
        kept = in_memory(app)
    assert mine.status_code == 200 and mine.json()["status"] == "ended"
    assert their_oldest.status_code == 404
    assert kept == 1 + 3


async def test_a_detached_generation_holds_an_admission_slot_until_it_ends(gateway, fake_engine):
    import orjson

    from gateway.http.auth import LOCAL_PRINCIPAL
    from gateway.http.context import RequestContext
    from gateway.protocols.openai.dialect import OPENAI
    from gateway.relay.call import StreamCall

    fake_engine.chunk_delay = 0.01
    async with gateway(max_inflight_per_key=1, flow_control=False) as (base, app), fresh_client(base) as client:
        core = app.state.gateway
        body = orjson.dumps({**chat(100), "stream_options": {"include_usage": True}})
        request = RequestContext("req-bg", principal=LOCAL_PRINCIPAL)  # no client: nobody to answer

        async def start():
            await app.state.sessions.start_detached(
                StreamCall(path="/v1/chat/completions", body=body, dialect=OPENAI, session_id="bg-slot"), request)

        await in_server(app, start)
        while_running = await client.post("/v1/chat/completions", json=chat(2))
        await until(lambda: core.admission.inflight == 0)  # the run ended and gave its slot back
        after = await read_stream(client, "POST", "/v1/chat/completions", json=chat(2))
    assert while_running.status_code == 429
    assert after.status == 200


async def test_a_key_at_its_cap_can_still_look_at_and_cancel_its_own_generation(gateway, fake_engine):
    """Cancel and state are control requests: never refused for the cap they exist to free, still owner-checked."""
    fake_engine.chunk_delay = 0.02
    async with gateway(max_inflight_per_key=1, api_keys=[READ_KEY, OTHER_KEY], flow_control=False) as (base, app), \
            fresh_client(base, headers=bearer(READ_KEY)) as client:
        async with client.stream("POST", "/v1/chat/completions", json=chat(2000, session_id="capped")) as stream:
            lines = stream.aiter_lines()
            first = [await anext(lines) for _ in range(3)]  # id, data, blank: the stream holds the key's one slot
            refused = await client.post("/v1/chat/completions", json=chat(2, session_id="other"))
            state = await client.get("/v1/sessions/capped")
            foreign = await client.post("/v1/cancel/capped", headers=bearer(OTHER_KEY))
            cancel = await client.post("/v1/cancel/capped")
            rest = [line async for line in lines]
        admission = app.state.gateway.admission
        await until(lambda: admission.inflight == 0)
        after = await read_stream(client, "POST", "/v1/chat/completions", json=chat(2, session_id="after"))
    assert refused.status_code == 429  # a second generation is still refused
    assert state.status_code == 200 and state.json()["status"] == "live"
    assert foreign.status_code == 404  # another key's session does not exist for it
    assert cancel.status_code == 200 and cancel.json()["cancelled"] is True
    events, _ = parse_sse(first + rest)
    assert events[-1].done and events[-2].json["choices"][0]["finish_reason"] == "cancelled"
    assert len(events) < 100  # the cancel ended it, not its 2000 tokens
    assert after.status == 200 and after.dones == 1
