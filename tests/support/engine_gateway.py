"""Helpers for tests of the gateway in front of the real vLLM engine (``vllm_engine``, tests/support/engine.py).

Settings for such a gateway, greedy request bodies of a fixed length (deterministic, so
replays and resumes compare exactly), and a probe of the engine's own metrics, for tests
that watch what vLLM does (a generation aborted, tokens generated).
"""

from __future__ import annotations

import asyncio
import time

import httpx

from gateway.config import Settings
from tests.support.engine import parse_prometheus
from tests.support.gateway import READ_KEY

RUNNING = "vllm:num_requests_running"


def engine_settings(engine, tmp_path, **overrides) -> Settings:
    """A gateway behind ``READ_KEY`` with its own SQLite file, sessions off, keep-alive every second."""
    values = dict(
        vllm_base_url=engine.base_url,
        vllm_api_key=engine.api_key,
        api_keys=[READ_KEY],
        database_url=f"sqlite+aiosqlite:///{tmp_path}/gateway.db",
        session_store="off",
        sse_keepalive_seconds=1.0,
    )
    values.update(overrides)
    return Settings(**values)


def engine_session_settings(engine, **overrides) -> Settings:
    """A gateway for session tests: no access log, no engine polling, keep-alive every 2 s."""
    values = dict(
        vllm_base_url=engine.base_url,
        vllm_api_key=engine.api_key,
        access_log=False,
        engine_poll_interval=60,
        sse_keepalive_seconds=2.0,
    )
    values.update(overrides)
    return Settings(**values)


def engine_chat_body(engine, max_tokens: int, *, prompt: str = "Tell me a long story about a lighthouse.",
                     **extra) -> dict:
    """A streamed chat completion, greedy (deterministic) and of a fixed length: the engine ignores end-of-sequence."""
    return {"model": engine.model, "messages": [{"role": "user", "content": prompt}], "stream": True,
            "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, **extra}


class EngineProbe:
    """Reads the engine's /metrics through one client for the whole test.

    (``EngineHandle.ametrics`` builds a client per call, which loads CA certificates each
    time: CPU that a tight poll would take from the gateway under test in this process.)
    """

    def __init__(self, engine, client: httpx.AsyncClient) -> None:
        self.engine = engine
        self.client = client

    async def metric(self, name: str) -> float:
        response = await self.client.get(f"{self.engine.base_url}/metrics", headers=self.engine.headers)
        response.raise_for_status()
        return parse_prometheus(response.text).get(name, 0.0)

    async def running_after_a_step(self) -> float:
        """``EngineHandle.arunning_after_a_step`` through this probe's client."""
        return await self.engine.arunning_after_a_step(self.client)

    async def wait_until_nothing_runs(self, *, timeout: float) -> None:
        """``EngineHandle.await_nothing_runs`` through this probe's client."""
        await self.engine.await_nothing_runs(timeout=timeout, client=self.client)

    async def wait_for(self, name: str, predicate, *, timeout: float) -> float:
        """Poll until ``predicate(value)``; return how long it took."""
        started = time.monotonic()
        deadline = started + timeout
        while True:
            value = await self.metric(name)
            if predicate(value):
                return time.monotonic() - started
            assert time.monotonic() < deadline, f"{name} is still {value} after {timeout}s"
            await asyncio.sleep(0.05)
