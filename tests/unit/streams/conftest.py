"""Fast session tests: the gateway under real uvicorn in front of the fake engine.

Real sockets because SSE timing and disconnects cannot be seen through
httpx's ASGITransport, which buffers whole responses.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable

import pytest

from gateway.app import create_app
from gateway.config import Settings
from tests.fixtures.servers import serve_uvicorn
from tests.support.fake_engine import settings_for

READ_KEY = "sk-streams-alice-0123456789"
OTHER_KEY = "sk-streams-bob-9876543210"


@pytest.fixture
def make_settings(tmp_path, fake_engine) -> Callable[..., Settings]:
    def make(**overrides) -> Settings:
        return settings_for(fake_engine, **{"database_url": f"sqlite+aiosqlite:///{tmp_path}/sessions.db",
                                            "session_store": "sqlite", "sse_keepalive_seconds": 5, **overrides})

    return make


@contextlib.asynccontextmanager
async def running_gateway(settings: Settings) -> AsyncIterator[tuple[str, object]]:
    """(base URL, app) of the gateway served by uvicorn on a free port."""
    app = create_app(settings)
    async with serve_uvicorn(app) as base_url:
        yield base_url, app


@pytest.fixture
def gateway(make_settings):
    """``async with gateway(**settings) as (base_url, app)``."""
    return lambda **overrides: running_gateway(make_settings(**overrides))


def chat(max_tokens: int = 8, **extra) -> dict:
    return {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "stream": True,
            "max_tokens": max_tokens, **extra}


def in_memory(app) -> int:
    """Generations the app keeps in memory, as its /metrics reports them."""
    return int(app.state.gateway.metrics.registry.get_sample_value("gateway_sessions_in_memory"))
