"""A replica starting does not wait for, nor stop, the other replicas' work on the PostgreSQL stores' tables.

The session store and the stored responses set their tables up as each replica starts. The
set-up used to run ``ALTER TABLE ... ADD COLUMN IF NOT EXISTS`` and ``CREATE INDEX IF NOT
EXISTS`` every time, which lock the table even when there is nothing to add: a replica starting
while another replica's transaction was open on the table waited for it, and every query behind
it waited too. Now the catalog is read first and the tables are left alone when they are
complete; a database missing a column or an index still gets it.
"""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from gateway.protocols.responses.records.postgres import PostgresResponses
from gateway.sessions.store.postgres import PostgresStore

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

DEADLINE = 20.0  # only so that a start that waits on the lock fails the test instead of hanging it


def dsn_of(url: str) -> str:
    return "postgresql://" + url.partition("://")[2]


def stores(url: str) -> list:
    return [PostgresStore(url, replica="r", lease_seconds=10, poll_interval=0.05), PostgresResponses(url)]


async def test_a_replica_starts_while_another_holds_a_transaction_on_the_tables(postgres_database_url):
    first = stores(postgres_database_url)
    for store in first:
        await store.open()  # the tables now exist, complete
    other_replica = await asyncpg.connect(dsn_of(postgres_database_url))
    try:
        writing = other_replica.transaction()
        await writing.start()
        # A write in progress (its transaction open), as another replica's flush holds one.
        await other_replica.execute("UPDATE stream_sessions SET count = count WHERE false")
        await other_replica.execute("UPDATE stored_responses SET status = status WHERE false")
        second = stores(postgres_database_url)
        try:
            async with asyncio.timeout(DEADLINE):
                for store in second:
                    await store.open()
            # ... and the other replica's transaction was neither waited for nor stopped: it still commits.
            await other_replica.execute("INSERT INTO stream_replicas VALUES ('other', 0)")
            await writing.commit()
        finally:
            for store in second:
                await store.close()
    finally:
        await other_replica.close()
        for store in first:
            await store.close()


async def test_a_missing_column_and_index_are_still_added(postgres_database_url):
    for store in stores(postgres_database_url):
        await store.open()
        await store.close()
    db = await asyncpg.connect(dsn_of(postgres_database_url))
    try:
        await db.execute("ALTER TABLE stream_sessions DROP COLUMN dialect")
        await db.execute("DROP INDEX stored_responses_by_expiry")
        for store in stores(postgres_database_url):
            await store.open()
            await store.close()
        columns = await db.fetch("SELECT column_name FROM information_schema.columns WHERE table_name = 'stream_sessions'")
        indexes = await db.fetch("SELECT indexname FROM pg_indexes WHERE tablename = 'stored_responses'")
    finally:
        await db.close()
    assert "dialect" in {row["column_name"] for row in columns}
    assert "stored_responses_by_expiry" in {row["indexname"] for row in indexes}
