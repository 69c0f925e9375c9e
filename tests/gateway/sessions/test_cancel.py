"""Cancel and disconnects, seen from vLLM's own metrics: the generation really stops."""

from __future__ import annotations

import asyncio
import time

import openai
import pytest

from tests.support.engine_gateway import engine_chat_body, engine_session_settings
from tests.support.gateway import running_gateway
from tests.support.sse_client import fresh_client, read_stream
from tests.support.waiting import until

pytestmark = [pytest.mark.integration, pytest.mark.engine]

LONG = 8000  # tokens: many seconds on the CPU engine, so only an abort ends it early
GENERATED = "vllm:generation_tokens_total"


async def test_cancel_aborts_vllm_ends_every_listener_and_frees_the_session(idle_vllm_engine, probe, tmp_path):
    engine = idle_vllm_engine
    settings = engine_session_settings(engine, session_store="sqlite", database_url=f"sqlite:///{tmp_path}/s.db")
    async with running_gateway(settings) as (base, app), fresh_client(base) as client:
        before = await probe.metric(GENERATED)
        owner = asyncio.create_task(read_stream(client, "POST", "/v1/chat/completions",
                                                json=engine_chat_body(engine, LONG, session_id="cancel-me")))
        await until(lambda: (s := app.state.sessions.local("local", "cancel-me")) is not None and s.log.next_index > 10)
        follower = asyncio.create_task(read_stream(client, "GET", "/v1/sessions/cancel-me/events"))
        await until(lambda: app.state.sessions.local("local", "cancel-me").consumers == 2)
        assert await probe.running_after_a_step() == 1  # (its events show it generating: vLLM says so too)
        answer = await client.post("/v1/cancel/cancel-me")
        # Bounded for the test's sake only: what proves the abort is the token count below.
        await probe.wait_until_nothing_runs(timeout=60)
        generated = await probe.metric(GENERATED) - before
        a, b = await owner, await follower
        reused = await read_stream(client, "POST", "/v1/chat/completions",
                                   json=engine_chat_body(engine, 5, session_id="cancel-me"))
    assert answer.status_code == 200 and answer.json() == {
        "session_id": "cancel-me", "object": "session.cancel", "cancelled": True, "status": "cancelled"}
    assert generated < LONG / 2  # cut short by the cancel, not generated to the end
    for got in (a, b):
        ending = got.events[-2].json
        assert ending["choices"][0]["finish_reason"] == "cancelled" and ending["cancel_reason"] == "cancel_request"
        assert got.events[-1].done and got.dones == 1
        assert ending["id"] == got.events[0].json["id"]  # reads as the stream's own last chunk
    assert [e.data for e in a.events] == [e.data for e in b.events]
    assert reused.status == 200 and reused.dones == 1 and reused.indices == list(range(len(reused.events)))
    assert reused.events[-2].json["choices"][0]["finish_reason"] == "length"


async def test_openai_sdk_client_without_session_id_leaving_aborts_vllm_at_once(idle_vllm_engine, probe, tmp_path):
    engine = idle_vllm_engine
    settings = engine_session_settings(engine, session_store="sqlite", database_url=f"sqlite:///{tmp_path}/s.db",
                                cancel_after_disconnect_seconds=60)
    async with running_gateway(settings) as (base, app):
        before = await probe.metric(GENERATED)
        sdk = openai.AsyncOpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
        stream = await sdk.chat.completions.create(
            model=engine.model, messages=[{"role": "user", "content": "Tell me everything."}],
            max_tokens=LONG, temperature=0, stream=True, extra_body={"ignore_eos": True})
        seen = 0
        async for _chunk in stream:
            seen += 1
            if seen == 5:
                break
        await stream.close()
        await probe.wait_until_nothing_runs(timeout=60)
        generated = await probe.metric(GENERATED) - before
        await sdk.close()
        metrics = app.state.gateway.metrics
        await until(lambda: metrics.streams_ended.labels("client_disconnect")._value.get() == 1)
        counted = metrics.tokens.labels("local", "completion")._value.get()
    # Aborted at once although the gateway would keep a named session 60 s: far fewer tokens than
    # asked (the gateway's count is an estimate from the chunks; the engine's is exact).
    assert generated < LONG / 2
    assert 4 <= counted <= generated


async def test_a_named_session_outlives_its_client_then_is_cancelled_upstream(idle_vllm_engine, probe, tmp_path):
    engine = idle_vllm_engine
    grace = 3.0
    settings = engine_session_settings(engine, session_store="memory", cancel_after_disconnect_seconds=grace)
    async with running_gateway(settings) as (base, app), fresh_client(base) as client:
        got = await read_stream(client, "POST", "/v1/chat/completions",
                                json=engine_chat_body(engine, LONG, session_id="orphan-ok"), stop_after=5)
        left_at = time.time()
        session = app.state.sessions.local("local", "orphan-ok")
        await until(lambda: session.consumers == 0)
        produced_then = session.log.next_index
        await until(lambda: session.log.next_index > produced_then + 20 or not session.live, timeout=10)
        alone = session.log.next_index - produced_then
        await until(lambda: not session.live, timeout=15)
        stopped_after = session.ended_at - left_at
        await probe.wait_until_nothing_runs(timeout=60)
        replay = await read_stream(client, "GET", "/v1/sessions/orphan-ok/events",
                                   headers={"Last-Event-ID": got.last_id})
    assert alone > 20  # it went on generating with nobody connected
    # Its grace period, then the timer's cancel (the reason says which ended it); the upper bound
    # is the 15 s wait above, as a loaded machine may fire the timer late, never early.
    assert stopped_after > grace - 0.1
    assert replay.events[-2].json["cancel_reason"] == "disconnect_timeout"
    assert replay.events[0].index == 5 and replay.dones == 1
