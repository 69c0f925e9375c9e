"""Schema set-up for the asyncpg stores (sessions, stored responses): their DDL runs only when something is missing.

Every replica sets the schema up as it starts. ``CREATE TABLE IF NOT EXISTS`` leaves an existing
table alone, but ``ALTER TABLE ... ADD COLUMN IF NOT EXISTS`` takes an ACCESS EXCLUSIVE lock on the
table even when the column is there, and ``CREATE INDEX IF NOT EXISTS`` a SHARE lock: a replica
starting waited behind every transaction open on the table and, while it waited, stopped every
other replica's reads and writes of it (PostgreSQL queues later lock requests behind it). So the
catalog is read first (no lock on the tables) and the DDL runs, under the store's advisory lock so
that replicas starting together do not race, only when a table, a column or an index is missing:
a new database, or one of an earlier release.
"""

from __future__ import annotations

import asyncpg


async def ensure_schema(db: asyncpg.Connection, schema: str, lock_key: int, *,
                        columns: dict[str, tuple[str, ...]], indexes: tuple[str, ...] = ()) -> bool:
    """Run ``schema`` unless every table of ``columns`` has those columns and every index exists; True if run.

    ``columns``: each table, with at least one of its first columns and every column added since.
    """
    if await _in_place(db, columns, indexes):
        return False
    async with db.transaction():
        await db.execute("SELECT pg_advisory_xact_lock($1)", lock_key)
        await db.execute(schema)
    return True


async def _in_place(db: asyncpg.Connection, columns: dict[str, tuple[str, ...]], indexes: tuple[str, ...]) -> bool:
    found = await db.fetch("SELECT table_name, column_name FROM information_schema.columns "
                           "WHERE table_schema = current_schema() AND table_name = ANY($1::text[])", list(columns))
    present = {(row["table_name"], row["column_name"]) for row in found}
    if any((table, column) not in present for table, names in columns.items() for column in names):
        return False
    if not indexes:
        return True
    count = await db.fetchval("SELECT count(*) FROM pg_indexes WHERE schemaname = current_schema() "
                              "AND indexname = ANY($1::text[])", list(indexes))
    return count == len(indexes)
