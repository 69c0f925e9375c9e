"""Session tests, fast and with the real engine, in one folder.

Fast ones: the gateway under real uvicorn in front of the fake engine (``gateway``,
``make_session_settings``). Real sockets because SSE timing and disconnects cannot be seen
through httpx's ASGITransport, which buffers whole responses. With the real engine:
``probe`` watches the (idle) engine's own metrics; settings and bodies come from
tests/support/engine_gateway.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import httpx
import pytest

from gateway.config import Settings
from gateway.sessions.store.sqlite import SQLiteStore
from tests.support.engine_gateway import EngineProbe
from tests.support.fake_engine import settings_for
from tests.support.gateway import running_gateway


@pytest.fixture
def make_session_settings(tmp_path, fake_engine) -> Callable[..., Settings]:
    """Settings for a gateway in front of the fake engine, sessions on SQLite in the test's own file."""
    def make(**overrides) -> Settings:
        return settings_for(fake_engine, **{"database_url": f"sqlite+aiosqlite:///{tmp_path}/sessions.db",
                                            "session_store": "sqlite", "sse_keepalive_seconds": 5, **overrides})

    return make


@pytest.fixture
def gateway(make_session_settings):
    """``async with gateway(**settings) as (base_url, app)``."""
    return lambda **overrides: running_gateway(make_session_settings(**overrides))


@pytest.fixture
async def probe(idle_vllm_engine) -> AsyncIterator[EngineProbe]:
    """The (idle) engine's metrics, for tests that watch what vLLM itself does."""
    async with httpx.AsyncClient(verify=False, timeout=10) as client:
        yield EngineProbe(idle_vllm_engine, client)


@pytest.fixture
async def sqlite_store(tmp_path) -> AsyncIterator[SQLiteStore]:
    """An open SQLite session store of its own file (one replica, "here"), closed after the test."""
    store = SQLiteStore(f"sqlite+aiosqlite:///{tmp_path}/sessions.db", replica="here", lease_seconds=30,
                        poll_interval=0.05)
    await store.open()
    yield store
    await store.close()
