"""The wire protocol of sessions, against the fake engine: ids, [DONE], resume ranges, errors."""

from __future__ import annotations

import asyncio

import pytest

from tests.support.bodies import stream_body
from tests.support.gateway import running_gateway
from tests.support.servers import free_port
from tests.support.sse_client import fresh_client, read_stream
from tests.support.waiting import until


async def test_every_event_has_a_contiguous_id_and_done_is_the_last(gateway):
    async with gateway() as (base, app), fresh_client(base) as client:
        got = await read_stream(client, "POST", "/v1/chat/completions", json=stream_body(6))
    assert got.status == 200
    sid = got.session_id
    assert sid and len(sid) >= 20  # generated, unguessable
    assert [e.id for e in got.events] == [f"{sid}:{i}" for i in range(len(got.events))]
    assert got.events[-1].done and got.dones == 1
    # role chunk + 6 tokens, the usage chunk stripped (not asked for) without leaving a gap
    assert len(got.events) == 1 + 6 + 1
    assert got.content == "".join(f"t{i} " for i in range(6))
    assert got.events[-2].json["choices"][0]["finish_reason"] == "length"


async def test_usage_chunk_is_kept_when_the_client_asked_for_it(gateway):
    async with gateway() as (base, app), fresh_client(base) as client:
        got = await read_stream(client, "POST", "/v1/chat/completions",
                                json=stream_body(3, stream_options={"include_usage": True}))
    usage = got.events[-2].json
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 3
    assert got.indices == list(range(len(got.events)))


async def test_generated_session_ids_differ(gateway):
    async with gateway() as (base, app), fresh_client(base) as client:
        ids = {(await read_stream(client, "POST", "/v1/chat/completions", json=stream_body(1))).session_id
               for _ in range(5)}
    assert len(ids) == 5


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_resume_replays_exactly_the_events_after_last_event_id(gateway, store):
    async with gateway(session_store=store) as (base, app), fresh_client(base) as client:
        full = await read_stream(client, "POST", "/v1/chat/completions", json=stream_body(10, session_id="conv-1"))
        for last in (-1, 0, 4, 10):
            again = await read_stream(client, "POST", "/v1/chat/completions", json=stream_body(10, session_id="conv-1"),
                                      headers={"Last-Event-ID": f"conv-1:{last}"})
            assert again.status == 200
            assert [e.id for e in again.events] == [e.id for e in full.events[last + 1:]]
            assert [e.data for e in again.events] == [e.data for e in full.events[last + 1:]]
            assert again.dones == 1
        # The EventSource route: header, query, bare index in the query.
        by_header = await read_stream(client, "GET", "/v1/sessions/conv-1/events", headers={"Last-Event-ID": "conv-1:7"})
        by_query = await read_stream(client, "GET", "/v1/sessions/conv-1/events?last_event_id=7")
        from_start = await read_stream(client, "GET", "/v1/sessions/conv-1/events")
    assert [e.id for e in by_header.events] == [e.id for e in by_query.events] == [e.id for e in full.events[8:]]
    assert [e.data for e in from_start.events] == [e.data for e in full.events]


async def test_header_wins_over_a_stale_query(gateway):
    async with gateway() as (base, app), fresh_client(base) as client:
        full = await read_stream(client, "POST", "/v1/chat/completions", json=stream_body(6, session_id="es-1"))
        got = await read_stream(client, "GET", "/v1/sessions/es-1/events?last_event_id=es-1:1",
                                headers={"Last-Event-ID": "es-1:5"})
    assert [e.id for e in got.events] == [e.id for e in full.events[6:]]


async def test_nothing_left_after_done_is_204_and_past_the_end_is_400(gateway):
    async with gateway() as (base, app), fresh_client(base) as client:
        full = await read_stream(client, "POST", "/v1/chat/completions", json=stream_body(2, session_id="end-1"))
        last = full.events[-1].index
        after_done = await client.get("/v1/sessions/end-1/events", headers={"Last-Event-ID": f"end-1:{last}"})
        beyond = await client.get("/v1/sessions/end-1/events", headers={"Last-Event-ID": f"end-1:{last + 5}"})
    assert after_done.status_code == 204
    assert beyond.status_code == 400
    assert beyond.json()["error"]["param"] == "last_event_id"


@pytest.mark.parametrize("value", ["nonsense", "end-1:x", "end-1:-2", "other-session:1", "bad id:1"])
async def test_malformed_last_event_id_is_a_400_naming_it(gateway, value):
    async with gateway() as (base, app), fresh_client(base) as client:
        await read_stream(client, "POST", "/v1/chat/completions", json=stream_body(2, session_id="end-1"))
        response = await client.get("/v1/sessions/end-1/events", headers={"Last-Event-ID": value})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "last_event_id"


async def test_unknown_session_is_404_everywhere(gateway):
    async with gateway() as (base, app), fresh_client(base) as client:
        resume = await client.post("/v1/chat/completions", json=stream_body(2), headers={"Last-Event-ID": "nope:3"})
        events = await client.get("/v1/sessions/nope/events")
        cancel = await client.post("/v1/cancel/nope")
        state = await client.get("/v1/sessions/nope")
    for response in (resume, events, cancel, state):
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "session_not_found"


async def test_sessions_off_keeps_plain_streams_and_answers_404(gateway):
    async with gateway(session_store="off") as (base, app), fresh_client(base) as client:
        got = await read_stream(client, "POST", "/v1/chat/completions", json=stream_body(3))
        cancel = await client.post("/v1/cancel/whatever")
        named = await client.post("/v1/chat/completions", json=stream_body(3, session_id="x"))
    assert got.status == 200 and got.session_id is None and all(e.id is None for e in got.events)
    assert cancel.status_code == 404 and cancel.json()["error"]["code"] == "sessions_disabled"
    assert named.status_code == 400 and named.json()["error"]["param"] == "session_id"


async def test_engine_refusal_before_the_stream_keeps_its_http_status(gateway, fake_engine):
    fake_engine.mode = "http_400"
    async with gateway() as (base, app), fresh_client(base) as client:
        refused = await client.post("/v1/chat/completions", json=stream_body(2, session_id="refused-1"))
        after = await client.get("/v1/sessions/refused-1")
    assert refused.status_code == 400
    assert refused.json()["error"]["message"] == "temperature must be non-negative"
    assert after.status_code == 404  # nothing to resume: the client got the engine's answer


async def test_engine_down_is_503(make_session_settings):
    settings = make_session_settings(vllm_base_url=f"http://127.0.0.1:{free_port()}")
    async with running_gateway(settings) as (base, app), fresh_client(base) as client:
        response = await client.post("/v1/chat/completions", json=stream_body(2))
    # The engine never answered, so its model list is unknown: 503 either way, in the envelope.
    assert response.status_code == 503
    assert response.json()["error"]["type"] == "service_unavailable"


async def test_engine_breaking_mid_stream_ends_with_an_error_event_then_done(gateway, fake_engine):
    fake_engine.mode = "break_mid_stream"
    async with gateway() as (base, app), fresh_client(base) as client:
        got = await read_stream(client, "POST", "/v1/chat/completions", json=stream_body(10, session_id="broken-1"))
        replay = await read_stream(client, "GET", "/v1/sessions/broken-1/events")
    assert got.status == 200
    assert got.events[-2].json["error"]["code"] == "stream_interrupted"
    assert got.events[-1].done and got.dones == 1
    assert got.indices == list(range(len(got.events)))
    assert [e.data for e in replay.events] == [e.data for e in got.events]


async def test_keepalive_comments_during_silence_take_no_index(gateway, fake_engine):
    fake_engine.chunk_delay = 0.45
    async with gateway(sse_keepalive_seconds=0.1) as (base, app), fresh_client(base) as client:
        got = await read_stream(client, "POST", "/v1/chat/completions", json=stream_body(3))
    assert "keep-alive" in got.comments
    assert got.indices == list(range(len(got.events)))


async def test_a_busy_named_session_refuses_a_second_generation(gateway, fake_engine):
    fake_engine.chunk_delay = 0.05
    async with gateway() as (base, app), fresh_client(base) as client:
        first = asyncio.create_task(read_stream(client, "POST", "/v1/chat/completions", json=stream_body(40, session_id="busy-1")))
        await until(lambda: app.state.sessions.local("local", "busy-1") is not None)
        second = await client.post("/v1/chat/completions", json=stream_body(2, session_id="busy-1"))
        done = await first
    assert second.status_code == 409 and second.json()["error"]["code"] == "session_busy"
    assert second.json()["error"]["type"] == "invalid_request_error"  # (OpenAI's word for a 409, as for every 4xx)
    assert done.dones == 1
