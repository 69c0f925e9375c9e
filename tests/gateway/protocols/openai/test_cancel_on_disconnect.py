"""A client that goes away stops the generation inside vLLM, streamed or not.

Observed on the engine itself: ``vllm:num_requests_running`` falls back to 0
and far fewer tokens were generated than the request asked for.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from gateway.app import create_app
from tests.support.engine_gateway import engine_settings
from tests.support.gateway import READ_KEY, WRITE_KEY
from tests.support.servers import serve_uvicorn

pytestmark = [pytest.mark.integration, pytest.mark.engine]

LONG = 8000  # tokens: 8-16 s of generation on the CPU engine, far longer than an abort takes
HEADERS = {"authorization": f"Bearer {READ_KEY}"}


async def wait_for_metric(engine, name: str, predicate, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while True:
        value = (await engine.ametrics()).get(name, 0.0)
        if predicate(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} = {value} after {timeout}s")
        await asyncio.sleep(0.05)


@pytest.fixture(params=["off", "sqlite"], ids=["plain-relay", "sessions"])
async def gateway(request, idle_vllm_engine, tmp_path):
    app = create_app(engine_settings(idle_vllm_engine, tmp_path, session_store=request.param,
                                     metrics_api_keys=[WRITE_KEY]))
    async with serve_uvicorn(app) as url:
        yield url


def body(**extra) -> dict:
    return {"model": "stack-2.9", "messages": [{"role": "user", "content": "Tell me everything."}],
            "max_tokens": LONG, "temperature": 0, "ignore_eos": True, **extra}


async def test_stream_disconnect_aborts_generation(gateway, idle_vllm_engine):
    engine = idle_vllm_engine
    before = (await engine.ametrics())["vllm:generation_tokens_total"]
    async with httpx.AsyncClient(timeout=30) as client:
        async with client.stream("POST", gateway + "/v1/chat/completions", json=body(stream=True),
                                 headers=HEADERS) as response:
            assert response.status_code == 200
            lines = 0
            async for line in response.aiter_lines():
                lines += line.startswith("data: ")
                if lines >= 5:
                    # Still generating when the client walks away: the abort is what is tested.
                    assert (await engine.ametrics())["vllm:num_requests_running"] >= 1
                    break
    # Bounded for the test's sake only (a generation run to its end also stops running): what
    # proves the abort is that the engine generated far fewer tokens than asked.
    await engine.await_nothing_runs(timeout=60)
    generated = (await engine.ametrics())["vllm:generation_tokens_total"] - before
    assert generated < LONG / 2, f"the engine generated {generated} tokens for a client that left"


async def test_non_streamed_disconnect_aborts_generation(gateway, idle_vllm_engine):
    engine = idle_vllm_engine
    before = (await engine.ametrics())["vllm:generation_tokens_total"]
    async with httpx.AsyncClient(timeout=60) as client:
        pending = asyncio.create_task(client.post(gateway + "/v1/chat/completions", json=body(), headers=HEADERS))
        try:
            await wait_for_metric(engine, "vllm:num_requests_running", lambda v: v >= 1, timeout=10.0)
        except AssertionError:
            answer = pending.result() if pending.done() else "no answer yet"
            raise AssertionError(f"the generation never ran; the gateway answered: {answer!r} "
                                 f"{getattr(answer, 'text', '')[:300]}") from None
        pending.cancel()  # closes the connection
        await asyncio.gather(pending, return_exceptions=True)
    await engine.await_nothing_runs(timeout=60)
    generated = (await engine.ametrics())["vllm:generation_tokens_total"] - before
    assert generated < LONG / 2, f"the engine generated {generated} tokens for a client that left"


async def test_aborted_stream_usage_is_still_counted(gateway, idle_vllm_engine):
    async with httpx.AsyncClient(timeout=30) as client:
        async with client.stream("POST", gateway + "/v1/chat/completions", json=body(stream=True),
                                 headers=HEADERS) as response:
            seen = 0
            async for line in response.aiter_lines():
                seen += line.startswith("data: ")
                if seen >= 10:
                    break
        await idle_vllm_engine.await_nothing_runs(timeout=60)
        deadline = time.monotonic() + 30
        while True:
            metrics = (await client.get(gateway + "/metrics", headers={"authorization": f"Bearer {WRITE_KEY}"})).text
            counted = [line for line in metrics.splitlines()
                       if line.startswith("gateway_tokens_total") and 'kind="completion"' in line]
            if counted and float(counted[0].split()[-1]) >= 9:
                break
            assert time.monotonic() < deadline, f"aborted stream's tokens not counted: {counted}"
            await asyncio.sleep(0.05)
        assert 'gateway_streams_ended_total{how="client_disconnect"}' in metrics
