"""The gateway in front of the fake engine, for the fast tests of every gateway package.

``make_settings(**overrides)`` builds settings for a gateway in front of the ``fake_engine``
(its own SQLite file, sessions off); ``client`` is that gateway behind an in-process httpx
client. Session tests (tests/gateway/sessions/) have their own ``make_session_settings``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import httpx
import pytest

from gateway.config import Settings
from tests.support.fake_engine import settings_for
from tests.support.gateway import serving


@pytest.fixture
def make_settings(tmp_path, fake_engine) -> Callable[..., Settings]:
    def make(**overrides) -> Settings:
        return settings_for(fake_engine, **{"database_url": f"sqlite+aiosqlite:///{tmp_path}/gateway.db",
                                            "session_store": "off", **overrides})

    return make


@pytest.fixture
async def client(make_settings) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(make_settings()) as client:
        yield client
