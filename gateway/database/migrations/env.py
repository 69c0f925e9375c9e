"""Alembic environment of the gateway's own tables: async engines for SQLite and PostgreSQL.

The whole upgrade runs in one transaction that first takes a lock (an advisory lock on
PostgreSQL, the write lock on SQLite), so replicas and workers starting together migrate once:
the others wait, then find nothing left to do.
"""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy import pool, text
from sqlalchemy.engine import Connection

from gateway.database.engine import create_engine
from gateway.database.migrations.runner import VERSION_TABLE
from gateway.database.tables import metadata

MIGRATION_LOCK_KEY = 0x67617465776179  # "gateway"

config = context.config
database_url = config.attributes["database_url"]
limits = config.attributes["limits"]


def _run_on(connection: Connection) -> None:
    sqlite = connection.dialect.name == "sqlite"
    context.configure(connection=connection, target_metadata=metadata, version_table=VERSION_TABLE,
                      compare_type=True, render_as_batch=sqlite, transactional_ddl=True)
    if sqlite:
        connection.exec_driver_sql("BEGIN IMMEDIATE")
    with context.begin_transaction():
        if not sqlite:
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
        context.run_migrations()


async def _run_online() -> None:
    engine = create_engine(database_url, limits, poolclass=pool.NullPool)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_run_on)
            await connection.commit()
    finally:
        await engine.dispose()


asyncio.run(_run_online())
