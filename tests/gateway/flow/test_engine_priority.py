"""vLLM's priority scheduler on the real CPU engine, fed the way the gateway will feed it.

An engine started by ``launch_vllm.sh`` with ``ENGINE_SCHEDULING_POLICY=priority`` (and two
sequences at a time, so it saturates at once) serves a request carrying the interactive band's
priority before low-band requests that were waiting inside it earlier, although those claim a
better priority in their bodies: the gateway's ``X-Vllm-Priority`` header wins over the body.
And the session's engine, on vLLM's default ``fcfs``, accepts any priority without a word:
why the gateway cannot detect the policy and has a setting instead.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import orjson
import pytest

from gateway.flow.bands import engine_priority_header
from tests.gateway.flow.conftest import RUNNING_SLOTS
from tests.gateway.flow.fakes import BATCH, INTERACTIVE
from tests.support.engine import EngineHandle

pytestmark = [pytest.mark.integration, pytest.mark.engine]

DEADLINE = 180.0


def chat(engine: EngineHandle, text: str, max_tokens: int, **extra) -> dict:
    return {"model": engine.model, "messages": [{"role": "user", "content": text}], "max_tokens": max_tokens,
            "ignore_eos": True, "temperature": 0, "stream": True, **extra}


async def engine_counts(engine: EngineHandle) -> tuple[float, float]:
    sample = await engine.ametrics()
    return sample.get("vllm:num_requests_running", 0.0), sample.get("vllm:num_requests_waiting", 0.0)


async def until_engine_holds(engine: EngineHandle, running: int, waiting: int) -> None:
    deadline = time.monotonic() + DEADLINE
    while await engine_counts(engine) != (running, waiting):
        if time.monotonic() > deadline:
            raise AssertionError(f"engine never held {running} running + {waiting} waiting: "
                                 f"{await engine_counts(engine)}")
        await asyncio.sleep(0.05)


async def stream(client: httpx.AsyncClient, engine: EngineHandle, body: dict, headers: dict[str, str],
                 name: str, first_tokens: list[str]) -> int:
    """Stream one completion; append ``name`` to ``first_tokens`` when its first token arrives."""
    async with client.stream("POST", f"{engine.base_url}/v1/chat/completions", json=body,
                             headers=engine.headers | headers) as response:
        assert response.status_code == 200, await response.aread()
        async for line in response.aiter_lines():
            if line.startswith("data: {") and name not in first_tokens:
                delta = orjson.loads(line[6:])["choices"]
                if delta and delta[0].get("delta", {}).get("content"):
                    first_tokens.append(name)
        return response.status_code


async def test_the_priority_scheduler_serves_the_interactive_band_before_earlier_low_band_requests(priority_engine):
    low = dict([engine_priority_header(BATCH, "priority")])
    high = dict([engine_priority_header(INTERACTIVE, "priority")])
    assert low == {"x-vllm-priority": "1"} and high == {"x-vllm-priority": "-1"}
    first_tokens: list[str] = []
    async with httpx.AsyncClient(timeout=DEADLINE) as client, asyncio.timeout(DEADLINE):
        # Two generations that would run for minutes hold both slots until this test ends one.
        running = [asyncio.create_task(stream(client, priority_engine, chat(priority_engine, f"Story {i}.", 4000),
                                              low, f"running-{i}", first_tokens)) for i in range(RUNNING_SLOTS)]
        await until_engine_holds(priority_engine, RUNNING_SLOTS, 0)
        waiting = []
        for i in range(3):  # low-band requests that claim the best priority in their body: the header wins
            waiting.append(asyncio.create_task(stream(
                client, priority_engine, chat(priority_engine, f"Waiting {i}.", 4, priority=-100),
                low, f"low-{i}", first_tokens)))
            await until_engine_holds(priority_engine, RUNNING_SLOTS, i + 1)  # their arrival order is certain
        waiting.append(asyncio.create_task(stream(client, priority_engine, chat(priority_engine, "Quick!", 4),
                                                  high, "interactive", first_tokens)))
        await until_engine_holds(priority_engine, RUNNING_SLOTS, 4)
        running[0].cancel()  # one slot frees (vLLM aborts a request whose client left): who gets it?
        assert await asyncio.gather(*waiting) == [200] * 4
        running[1].cancel()
        await asyncio.gather(*running, return_exceptions=True)
    assert [name for name in first_tokens if not name.startswith("running-")][0] == "interactive", first_tokens


async def test_vllm_on_fcfs_accepts_any_priority_so_the_policy_is_a_setting(idle_vllm_engine):
    async with httpx.AsyncClient(timeout=60) as client:
        for headers, body in (({"x-vllm-priority": "-1"}, {}), ({}, {"priority": 7}), ({}, {"priority": -3})):
            answer = await client.post(f"{idle_vllm_engine.base_url}/v1/chat/completions",
                                       headers=idle_vllm_engine.headers | headers,
                                       json=chat(idle_vllm_engine, "Hello", 2, stream=False) | body)
            assert answer.status_code == 200, answer.text
        # A band name in the body is not vLLM's: the gateway must take it out before relaying.
        answer = await client.post(f"{idle_vllm_engine.base_url}/v1/chat/completions", headers=idle_vllm_engine.headers,
                                   json=chat(idle_vllm_engine, "Hello", 2, stream=False, priority="batch"))
        assert answer.status_code == 400 and "priority" in answer.text
