"""A value the database cannot hold is the request's fault (400), an outage is not (503).

A lone surrogate (``"\\ud800"`` in JSON) is a string neither SQLite's driver nor asyncpg can encode;
an integer beyond 64 bits fits no column; a string longer than its ``varchar(n)`` is PostgreSQL's
SQLSTATE 22001. Retrying any of them never helps, so each is a 400 ``invalid_value``, on SQLite
and PostgreSQL alike; a database that refuses connections stays a 503.
"""

from __future__ import annotations

import datetime as dt
import time

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from gateway.database.tables.jobs import files
from gateway.http.errors import GatewayError
from gateway.jobs.store import JobsDatabase
from gateway.protocols.admin.errors import mapped
from gateway.tenancy.store import KeyStore
from gateway.tenancy.usage.report import usage_report
from tests.support.gateway import READ_KEY, WRITE_KEY, bearer, serving
from tests.support.servers import free_port

LONE_SURROGATE = '"\\ud800"'  # JSON's escape: Python's json gives a str no UTF-8 encoder takes


@pytest.mark.parametrize(("path", "body", "param"), [
    ("/admin/keys", f'{{"name": "x", "models": [{LONE_SURROGATE}]}}', "models"),  # (it was a 500, the key created)
    ("/admin/keys", f'{{"name": "x", "team_id": {LONE_SURROGATE}}}', "team_id"),
    ("/admin/teams", f'{{"name": "x", "limits": {{"end_user": {{"rpm": 1}}}}, "priority": {LONE_SURROGATE}}}',
     "priority"),
    ("/admin/webhooks", f'{{"url": "https://example.com/", "key_id": "k", "events": [{LONE_SURROGATE}]}}', "events"),
])
async def test_a_lone_surrogate_in_an_admin_body_is_a_400_naming_its_field(make_settings, migrated, path, body,
                                                                           param):
    settings = make_settings(api_keys=[READ_KEY], admin_api_keys=[WRITE_KEY], database_url=migrated)
    async with serving(settings, features={}) as gateway:
        answer = await gateway.post(path, content=body, headers={**bearer(WRITE_KEY), "content-type": "application/json"})
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["param"].split(".")[0] == param, answer.text
        listed = await gateway.get(path, headers=bearer(WRITE_KEY))
        assert listed.status_code == 200 and listed.json()["data"] == [], listed.text  # nothing was stored


def file_row(**values) -> dict:
    return {"id": "file-1", "owner": "key", "purpose": "batch", "filename": "a.jsonl", "bytes": 1,
            "created_at": time.time(), "storage": "database", **values}


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


async def test_a_value_the_key_store_cannot_hold_is_a_400_in_the_admin_api(jobs):
    """Through the admin API's one mapping (``mapped``): POST /admin/keys with ``"team_id": "\\ud800"``
    reached the store this way (a 503 on PostgreSQL, a 500 on SQLite) until the route refused it first."""
    store = KeyStore(jobs.database.engine)
    for attempt in (lambda: store.create_key(name="x", role="read", team_id="\ud800"),
                    lambda: usage_report(jobs.database.engine, start=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
                                         end=dt.datetime(2026, 1, 2, tzinfo=dt.UTC), group_by="key",
                                         key_id="\ud800")):
        with pytest.raises(GatewayError) as raised, mapped():
            await attempt()
        error = raised.value
        assert (error.status, error.type, error.code) == (400, "invalid_request_error", "invalid_value"), repr(error)
        assert "cannot be stored" in error.message and "surrogates not allowed" in error.message, error.message
    with mapped():
        assert (await store.list_keys()).items == []  # nothing was stored


# PostgreSQL only (SQLite keeps a string of any length in a varchar(n) column): the fixture's PostgreSQL case.
@pytest.mark.parametrize("database_url", [pytest.param("postgres", marks=[pytest.mark.integration, pytest.mark.postgres])],
                         indirect=True)
async def test_a_string_longer_than_its_postgresql_column_is_a_400(jobs, database_url):
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
