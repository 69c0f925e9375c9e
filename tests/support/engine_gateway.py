"""Sessions against the real vLLM engine: the gateway under real uvicorn on free ports."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import httpx
import pytest

from gateway.app import create_app
from gateway.config import Settings
from tests.fixtures.engine import parse_prometheus
from tests.fixtures.servers import serve_uvicorn

RUNNING = "vllm:num_requests_running"


def session_settings(engine, **overrides) -> Settings:
    values = dict(
        vllm_base_url=engine.base_url,
        vllm_api_key=engine.api_key,
        access_log=False,
        engine_poll_interval=60,
        sse_keepalive_seconds=2.0,
    )
    values.update(overrides)
    return Settings(**values)


@contextlib.asynccontextmanager
async def gateway_on(settings: Settings) -> AsyncIterator[tuple[str, object]]:
    app = create_app(settings)
    async with serve_uvicorn(app) as base_url:
        yield base_url, app


def chat_body(engine, max_tokens: int, *, prompt: str = "Tell me a long story about a lighthouse.", **extra) -> dict:
    """Greedy (deterministic) and of a fixed length: the engine ignores end-of-sequence."""
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


@pytest.fixture
async def probe(idle_vllm_engine) -> AsyncIterator[EngineProbe]:
    """The (idle) engine's metrics, for tests that watch what vLLM itself does."""
    async with httpx.AsyncClient(verify=False, timeout=10) as client:
        yield EngineProbe(idle_vllm_engine, client)


async def until(condition, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)
