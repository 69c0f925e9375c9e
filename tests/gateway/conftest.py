"""The gateway in front of the fake engine, for the fast tests of every gateway package.

``make_settings(**overrides)`` builds settings for a gateway in front of the ``fake_engine``
(its own SQLite file, sessions off); ``client`` is that gateway behind an in-process httpx
client. Session tests (tests/gateway/sessions/) have their own ``make_session_settings``.
``database_url`` is an empty database of the gateway's own (a SQLite file, and with the
integration tier a fresh PostgreSQL database), ``migrated`` the same with its tables, ``jobs``
its jobs tables opened as the gateway opens them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import httpx
import pytest

from gateway.config import Settings
from gateway.database.migrations import runner
from gateway.database.service import GatewayDatabase
from gateway.jobs.store import JobsDatabase
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


DATABASES = ["sqlite", pytest.param("postgres", marks=[pytest.mark.integration, pytest.mark.postgres])]


@pytest.fixture(params=DATABASES)
def database_url(request, tmp_path) -> str:
    """An empty database of the gateway: a SQLite file of the test's own, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path}/gateway.db"
    return request.getfixturevalue("postgres_database_url")


@pytest.fixture
async def migrated(database_url) -> str:
    """``database_url`` with the gateway's tables (the migrations run, as at start)."""
    await asyncio.to_thread(runner.upgrade, database_url)
    return database_url


@pytest.fixture
async def jobs(migrated) -> AsyncIterator[JobsDatabase]:
    """The jobs tables (files, batches, webhooks) of ``migrated``, opened as the gateway opens them, to drive by hand."""
    database = GatewayDatabase(Settings(database_url=migrated))
    await database.start()
    assert database.ready, database.error
    yield JobsDatabase(database)
    await database.stop()
