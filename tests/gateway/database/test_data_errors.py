"""A value the database cannot hold is the request's fault (400), an outage is not (503).

A lone surrogate (``"\\ud800"`` in JSON) is a string neither SQLite's driver nor asyncpg can encode;
an integer beyond 64 bits fits no column; a string longer than its ``varchar(n)`` is PostgreSQL's
SQLSTATE 22001. Retrying any of them never helps, so each is a 400 ``invalid_value``, on SQLite
and PostgreSQL alike; a database that refuses connections stays a 503.
"""

from __future__ import annotations

import time

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from gateway.config import Settings
from gateway.database.service import GatewayDatabase
from gateway.database.tables.jobs import files
from gateway.jobs.store import JobsDatabase
from tests.support.gateway import READ_KEY, WRITE_KEY, bearer, serving
from tests.support.servers import free_port

LONE_SURROGATE = '"\\ud800"'  # JSON's escape: Python's json gives a str no UTF-8 encoder takes


async def test_a_key_naming_a_team_id_the_database_cannot_hold_is_a_400(make_settings, migrated):
    settings = make_settings(api_keys=[READ_KEY], admin_api_keys=[WRITE_KEY], database_url=migrated)
    async with serving(settings, features={}) as gateway:
        answer = await gateway.post("/admin/keys", content=f'{{"name": "x", "team_id": {LONE_SURROGATE}}}',
                                    headers={**bearer(WRITE_KEY), "content-type": "application/json"})
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert error["type"] == "invalid_request_error" and error["code"] == "invalid_value", error
        assert "cannot be stored" in error["message"] and "surrogates not allowed" in error["message"], error
        listed = await gateway.get("/admin/keys", headers=bearer(WRITE_KEY))
        assert listed.status_code == 200 and listed.json()["data"] == [], listed.text  # nothing was stored


def file_row(**values) -> dict:
    return {"id": "file-1", "owner": "key", "purpose": "batch", "filename": "a.jsonl", "bytes": 1,
            "created_at": time.time(), "storage": "database", **values}


@pytest.fixture
async def jobs(migrated):
    database = GatewayDatabase(Settings(database_url=migrated))
    await database.start()
    assert database.ready, database.error
    yield JobsDatabase(database)
    await database.stop()


async def refusal(jobs: JobsDatabase, statement) -> object:
    with pytest.raises(Exception) as raised:
        async with jobs.begin() as db:
            await db.execute(statement)
    return raised.value


@pytest.mark.parametrize("statement", [
    pytest.param(files.insert().values(file_row(bytes=2**64)), id="an integer beyond 64 bits"),
    pytest.param(sa.select(files.c.id).where(files.c.owner == "\ud800"), id="a lone surrogate, compared"),
    pytest.param(files.insert().values(file_row(filename="\ud800")), id="a lone surrogate, stored"),
])
async def test_a_value_the_jobs_database_cannot_hold_is_a_400(jobs, statement):
    error = await refusal(jobs, statement)
    assert (error.status, error.type, error.code) == (400, "invalid_request_error", "invalid_value"), repr(error)
    assert error.message.startswith("a value in the request cannot be stored: "), error.message


async def test_a_string_longer_than_its_postgresql_column_is_a_400(jobs, database_url):
    if database_url.startswith("sqlite"):
        pytest.skip("SQLite keeps a string of any length in a varchar(n) column")
    error = await refusal(jobs, files.insert().values(file_row(filename="x" * 256)))  # varchar(255): SQLSTATE 22001
    assert (error.status, error.code) == (400, "invalid_value"), repr(error)
    assert "value too long for type character varying(255)" in error.message, error.message


async def test_a_database_that_refuses_connections_is_still_a_503(jobs, database_url):
    dead = (f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/gateway" if database_url.startswith("postgres")
            else "sqlite+aiosqlite:////nonexistent-directory/gateway.db")
    live = jobs.database.engine
    jobs.database.engine = create_async_engine(dead)
    try:
        error = await refusal(jobs, sa.select(files.c.id))
    finally:
        await jobs.database.engine.dispose()
        jobs.database.engine = live
    assert (error.status, error.code) == (503, "jobs_store_unavailable"), repr(error)
