"""A gateway with files, batches and webhooks in front of the fake engine, served by uvicorn, and SDK clients for it."""

from __future__ import annotations

import asyncio
import sqlite3
import time

import httpx
import pytest

from tests.support.fake_engine import settings_for
from tests.support.gateway import OTHER_KEY, READ_KEY, WRITE_KEY, running_gateway


@pytest.fixture
def jobs_settings(tmp_path, fake_engine):
    def make(**overrides):
        return settings_for(fake_engine, **{
            "database_url": f"sqlite+aiosqlite:///{tmp_path}/gateway.db", "session_store": "off",
            "api_keys": [READ_KEY, OTHER_KEY], "admin_api_keys": [WRITE_KEY], "batch_poll_seconds": 0.1,
            "webhook_allowed_networks": ["127.0.0.0/8"], "webhook_backoff_seconds": 0.2, "features": ["none"],
            **overrides})
    return make


async def jobs_ready(base_url: str, timeout: float = 60.0) -> None:
    """Wait until the gateway's database is migrated (the jobs routes answer 503 until then)."""
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(timeout=timeout) as client:
        while (await client.get(base_url + "/v1/files", headers={"authorization": f"Bearer {READ_KEY}"})
               ).status_code == 503:
            assert time.monotonic() < deadline, "the gateway's database was not migrated"
            await asyncio.sleep(0.05)


@pytest.fixture
async def jobs_gateway(jobs_settings):
    """(base URL, app) of a gateway (uvicorn, its own thread and loop) whose database is migrated."""
    async with running_gateway(jobs_settings()) as (base_url, app):
        await jobs_ready(base_url)
        yield base_url, app


async def wait_status(get, statuses: tuple[str, ...], timeout: float = 60.0):
    """Poll ``get()`` (an SDK retrieve) until its ``status`` (or ``processing_status``) is one of ``statuses``."""
    deadline = time.monotonic() + timeout
    while True:
        found = await get()
        status = getattr(found, "status", None) or getattr(found, "processing_status", None)
        if status in statuses:
            return found
        assert time.monotonic() < deadline, f"still {status} after {timeout}s"
        await asyncio.sleep(0.05)


def chat_line(custom_id: str, model: str, content: str = "hi", max_tokens: int = 8, **extra) -> dict:
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
                     **extra}}


async def admin(base_url: str, method: str, path: str, **kwargs) -> httpx.Response:
    # (a generous hang guard: httpx's default 5 s read timeout failed a key creation at load average 25)
    async with httpx.AsyncClient(base_url=base_url, headers={"authorization": f"Bearer {WRITE_KEY}"},
                                 timeout=60) as client:
        return await client.request(method, path, **kwargs)


def database(settings) -> sqlite3.Connection:
    """The test gateway's SQLite database, read (or moved on) beside the gateway."""
    connection = sqlite3.connect(settings.database_url.split(":///", 1)[1], timeout=30)
    connection.row_factory = sqlite3.Row
    return connection
