"""Fixtures for the gateway's fast tests: a fake engine and an app wired to it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable

import httpx
import pytest

from gateway.app import create_app
from gateway.config import Settings
from tests.support.fake_engine import settings_for

READ_KEY = "sk-test-read-0123456789"
WRITE_KEY = "sk-test-write-9876543210"


@pytest.fixture
def make_settings(tmp_path, fake_engine) -> Callable[..., Settings]:
    def make(**overrides) -> Settings:
        return settings_for(fake_engine, **{"database_url": f"sqlite+aiosqlite:///{tmp_path}/gateway.db",
                                            "session_store": "off", **overrides})

    return make


@contextlib.asynccontextmanager
async def serving(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """The app with its lifespan running, behind an in-process httpx client."""
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
            client.app = app  # type: ignore[attr-defined]
            yield client


@pytest.fixture
async def client(make_settings) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(make_settings()) as client:
        yield client
