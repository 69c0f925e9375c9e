"""The gateway's one migration history: up and down on SQLite and PostgreSQL, one version table, the declared schema."""

from __future__ import annotations

import asyncio
import os
import sys

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

from gateway.config import Settings
from gateway.database.engine import create_engine
from gateway.database.migrations import runner
from gateway.database.service import GatewayDatabase
from gateway.database.tables import metadata
from tests.support.gateway import READ_KEY, WRITE_KEY, bearer, serving

KEYS_TABLES = {"gateway_teams", "gateway_keys", "gateway_key_secrets", "gateway_usage", "gateway_state"}
JOBS_TABLES = {"gateway_files", "gateway_file_chunks", "gateway_batches", "gateway_batch_lines",
               "gateway_webhook_endpoints", "gateway_webhook_outbox"}
VERSION_TABLE = "gateway_alembic_version"


async def tables_of(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        async with engine.connect() as db:
            return set(await db.run_sync(lambda sync: sa.inspect(sync).get_table_names()))
    finally:
        await engine.dispose()


async def versions_of(url: str) -> list[str]:
    engine = create_engine(url)
    try:
        async with engine.connect() as db:
            return list((await db.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}"))).scalars())
    finally:
        await engine.dispose()


async def test_each_revision_goes_up_and_down(database_url):
    await asyncio.to_thread(runner.upgrade, database_url, "g0001")
    assert await tables_of(database_url) == KEYS_TABLES | {VERSION_TABLE}
    await asyncio.to_thread(runner.upgrade, database_url)
    assert await tables_of(database_url) == KEYS_TABLES | JOBS_TABLES | {VERSION_TABLE}
    assert await versions_of(database_url) == ["g0004"]
    await asyncio.to_thread(runner.upgrade, database_url)  # again: nothing left to do
    await asyncio.to_thread(runner.downgrade, database_url, "g0001")
    assert await tables_of(database_url) == KEYS_TABLES | {VERSION_TABLE}
    assert await versions_of(database_url) == ["g0001"]
    await asyncio.to_thread(runner.downgrade, database_url, "base")
    assert await tables_of(database_url) == {VERSION_TABLE}
    assert await versions_of(database_url) == []
    await asyncio.to_thread(runner.upgrade, database_url)
    assert await tables_of(database_url) == KEYS_TABLES | JOBS_TABLES | {VERSION_TABLE}


async def test_one_version_table_holds_the_whole_history(migrated):
    assert [name for name in await tables_of(migrated) if "alembic" in name] == [VERSION_TABLE]
    assert await versions_of(migrated) == ["g0004"]
    script = ScriptDirectory.from_config(runner.alembic_config(migrated))
    assert script.get_heads() == ["g0004"]  # one line: no branch, no second base
    assert [revision.revision for revision in script.walk_revisions()] == ["g0004", "g0003", "g0002", "g0001"]


async def test_the_migrated_schema_is_the_one_the_code_declares(migrated):
    engine = create_engine(migrated)
    try:
        async with engine.connect() as db:
            differences = await db.run_sync(lambda sync: compare_metadata(
                MigrationContext.configure(sync, opts={"compare_type": True, "version_table": VERSION_TABLE}),
                metadata))
    finally:
        await engine.dispose()
    assert differences == []
    assert set(metadata.tables) == KEYS_TABLES | JOBS_TABLES


async def test_the_marketplace_history_stays_its_own(migrated):
    from marketplace.migrations.runner import migrate

    await migrate(migrated)
    versions = {name for name in await tables_of(migrated) if "alembic" in name}
    assert versions == {VERSION_TABLE, "marketplace_alembic_version"}
    assert await versions_of(migrated) == ["g0004"]


async def test_two_starts_in_one_process_take_turns_and_both_become_ready(database_url):
    first, second = (GatewayDatabase(Settings(database_url=database_url)) for _ in range(2))
    try:
        await asyncio.gather(first.start(), second.start())
        assert first.ready and second.ready, (first.error, second.error)
        assert await versions_of(database_url) == ["g0004"]
    finally:
        await first.stop()
        await second.stop()


async def test_replicas_migrating_at_once_leave_one_history(database_url):
    """Three processes upgrade one empty database together: the lock lets one migrate, the others find it done."""
    environment = {**os.environ, "DATABASE_URL": database_url}
    processes = [await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.database.migrations.runner", "upgrade", "head", env=environment,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT) for _ in range(3)]
    outputs = await asyncio.wait_for(asyncio.gather(*(process.communicate() for process in processes)), 120)
    assert [process.returncode for process in processes] == [0, 0, 0], [out.decode()[-2000:] for out, _ in outputs]
    assert await versions_of(database_url) == ["g0004"]
    assert await tables_of(database_url) == KEYS_TABLES | JOBS_TABLES | {VERSION_TABLE}


async def test_a_gateway_start_migrates_once_for_keys_and_batches_alike(make_settings, monkeypatch):
    runs: list[str] = []

    def counted(url: str, revision: str = "head", **kwargs) -> None:
        runs.append(revision)
        real_upgrade(url, revision, **kwargs)

    real_upgrade = runner.upgrade
    monkeypatch.setattr(runner, "upgrade", counted)
    settings = make_settings(api_keys=[READ_KEY], admin_api_keys=[WRITE_KEY])
    async with serving(settings, features={}) as gateway:
        assert (await gateway.get("/admin/keys", headers=bearer(WRITE_KEY))).status_code == 200
        assert (await gateway.get("/v1/files", headers=bearer(READ_KEY))).status_code == 200
    assert runs == ["head"]
