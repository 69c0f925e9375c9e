"""The real engine fails under a real gateway process: frozen (SIGSTOP) and killed (SIGKILL) mid-stream.

What a client sees (an error event, then ``[DONE]``: never a stream that hangs or is cut),
what the gateway does meanwhile (other routes answer; ``/readyz`` turns 503; new requests
get 503 in the error envelope) and that it recovers by itself once the engine is back,
without a restart. The engine is the session's (``killable_vllm_engine``): the SIGKILL test
starts it again on its port, as a supervisor would. The gateway is the one ``make run``
starts (sessions on SQLite, greedy streams resumable), as its own process.

Each test records what it measured (seconds to notice, to recover) in ``figures``:
docs/testing.md has the table of one run.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from tests.support.engine_gateway import engine_chat_body
from tests.support.gateway_process import GatewayProcess
from tests.support.sse_client import Event, fresh_client, read_stream
from tests.support.waiting import until

pytestmark = [pytest.mark.integration, pytest.mark.engine]

CHAT = "/v1/chat/completions"
LONG = 8000  # tokens: the stream is still running whenever the test strikes
# The gateway's UPSTREAM_CHUNK_TIMEOUT here: long enough for the routes asked meanwhile (a
# look at a frozen engine waits up to 2 s), short enough to keep the test short.
CHUNK_TIMEOUT = 5.0
READY_WAIT = 120.0  # an engine's start on a loaded 2-core machine: 30-90 s


def gateway_for(engine, tmp_path, **env) -> GatewayProcess:
    return GatewayProcess(engine.handle, tmp_path / "gateway.log", DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path}/gw.db",
                          **env)


async def status_of(client: httpx.AsyncClient, path: str) -> int:
    try:
        return (await client.get(path, timeout=10)).status_code
    except httpx.HTTPError:
        return 0


def error_envelope(response: httpx.Response) -> dict:
    """The gateway's error body ({"error": {message, type, param, code}}), checked for shape."""
    error = response.json()["error"]
    assert set(error) >= {"message", "type", "param", "code"} and error["message"] and error["code"], error
    return error


def assert_ended_with_an_error_event(events: list[Event]) -> dict:
    """The stream's last two events: an error event, then ``[DONE]`` (once); returns the error."""
    assert events[-1].done and sum(event.done for event in events) == 1, [e.data[:80] for e in events[-3:]]
    error = events[-2].json["error"]
    assert error["message"] and error["code"], error
    assert [event.index for event in events] == list(range(len(events)))  # one stream, no id skipped
    return error


async def a_long_stream_under_way(client, engine) -> asyncio.Task:
    """A stream asking for far more tokens than any test waits for, once its first events are in."""
    events: list[Event] = []
    reading = asyncio.create_task(read_stream(client, "POST", CHAT, json=engine_chat_body(engine.handle, LONG),
                                              live=events))
    await until(lambda: len(events) >= 10, 60, what="the stream's first events")
    return reading


async def test_a_frozen_engine_ends_the_stream_at_the_chunk_timeout_and_the_gateway_serves_on(
        killable_vllm_engine, tmp_path, figures):
    engine = killable_vllm_engine
    gateway = await gateway_for(engine, tmp_path, UPSTREAM_CHUNK_TIMEOUT=str(CHUNK_TIMEOUT)).start()
    try:
        async with fresh_client(gateway.base_url) as client:
            reading = await a_long_stream_under_way(client, engine)
            with engine.paused():
                frozen_at = time.monotonic()
                # Asked at once, together: each must answer while the stream still waits on the engine.
                side = ["/livez", "/health", "/v1/models", "/api/products/search?q=lamp"]
                answers = await asyncio.gather(*(client.get(path) for path in side))
                stream_still_open = not reading.done()
                got = await reading  # bounded by the client's read timeout (60 s)
                ended_after = time.monotonic() - frozen_at
            # SIGCONT: the engine serves again, and the gateway sends it new requests at once.
            after = await read_stream(client, "POST", CHAT, json=engine_chat_body(engine.handle, 16))
    finally:
        await gateway.stop()
    assert {path: answer.status_code for path, answer in zip(side, answers, strict=True)} == dict.fromkeys(side, 200)
    assert stream_still_open
    assert [card["id"] for card in answers[2].json()["data"]] == [engine.handle.model, "stack-2.9"]
    assert got.status == 200 and not got.cut
    error = assert_ended_with_an_error_event(got.events)
    assert error["code"] == "stream_interrupted" and "did not answer in time" in error["message"], error
    assert len(got.events) < LONG / 2
    assert after.status == 200 and after.dones == 1
    assert after.events[-2].json["choices"][0]["finish_reason"] == "length"
    figures["stream_ended_after_freeze_s"] = round(ended_after, 2)


async def test_a_killed_engine_ends_the_stream_turns_readiness_off_and_is_served_again_once_restarted(
        killable_vllm_engine, tmp_path, figures):
    engine = killable_vllm_engine
    gateway = await gateway_for(engine, tmp_path).start()
    short = {"model": engine.handle.model, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8,
             "temperature": 0}
    try:
        async with fresh_client(gateway.base_url) as client:
            reading = await a_long_stream_under_way(client, engine)
            engine.kill()
            killed_at = time.monotonic()
            got = await reading
            ended_after = time.monotonic() - killed_at
            not_ready_after = await until(_is(client, "/readyz", 503), 30, what="/readyz 503", interval=0.1)
            refused = await client.post(CHAT, json=short)
            refused_stream = await client.post(CHAT, json={**short, "stream": True})

            restart_started = time.monotonic()
            await asyncio.to_thread(engine.restart)  # returns once the engine's own /health is 200
            engine_start = time.monotonic() - restart_started
            ready_lag = await until(_is(client, "/readyz", 200), 30, what="/readyz 200 again", interval=0.1)
            served = await client.post(CHAT, json=short)
        gateway_alive = gateway.process.poll() is None
    finally:
        await gateway.stop()
    assert got.status == 200 and not got.cut
    error = assert_ended_with_an_error_event(got.events)
    assert error["code"] == "stream_interrupted", error
    for response in (refused, refused_stream):
        assert response.status_code == 503
        assert error_envelope(response)["code"] in ("engine_unavailable", "engine_not_ready")
    assert served.status_code == 200 and served.json()["choices"][0]["message"]["content"]
    assert gateway_alive  # the same gateway process throughout: no restart needed
    figures["stream_ended_after_kill_s"] = round(ended_after, 2)
    figures["readyz_503_after_kill_s"] = round(not_ready_after, 2)
    figures["engine_restart_s"] = round(engine_start, 1)
    figures["gateway_ready_after_engine_s"] = round(ready_lag, 2)


def _is(client: httpx.AsyncClient, path: str, status: int):
    async def check() -> bool:
        return await status_of(client, path) == status
    return check
