"""Alembic environment: async engines for both SQLite and PostgreSQL.

The URL comes from the caller (``migrations.runner.migrate``), else the
``DATABASE_URL`` environment variable, else ``sqlalchemy.url`` in alembic.ini.
The whole upgrade runs in one transaction that first takes a lock (an
advisory lock on PostgreSQL, the write lock on SQLite), so several gateway
workers starting together migrate once.
"""

from __future__ import annotations

import asyncio
import os
from logging.config import fileConfig

from alembic import context
from sqlalchemy import pool, text
from sqlalchemy.engine import Connection

from marketplace.database.engines import create_engine, normalize_url
from marketplace.migrations.runner import VERSION_TABLE
from marketplace.migrations.schema import metadata

MIGRATION_LOCK_KEY = 0x6D61726B6574  # "market"

config = context.config
if config.attributes.get("configure_logging", True) and config.config_file_name:
    fileConfig(config.config_file_name)

database_url = normalize_url(
    config.attributes.get("database_url")
    or os.environ.get("DATABASE_URL")
    or config.get_main_option("sqlalchemy.url")
)


def _configure(**kwargs) -> None:
    context.configure(
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        compare_type=True,
        **kwargs,
    )


def run_migrations_offline() -> None:
    _configure(url=database_url, literal_binds=True, dialect_opts={"paramstyle": "named"})
    with context.begin_transaction():
        context.run_migrations()


def _run_on(connection: Connection) -> None:
    sqlite = connection.dialect.name == "sqlite"
    _configure(connection=connection, render_as_batch=sqlite, transactional_ddl=True)
    if sqlite:
        # SQLite changes a constraint by rebuilding the table (Alembic's batch mode: copy, drop,
        # rename). With foreign keys on, dropping the old table would cascade-delete every row
        # that refers to it, so they are off for the migration (SQLite's own procedure for
        # schema changes; the pragma cannot change inside a transaction) and checked at the end.
        connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
        # SQLite's write lock, taken before the version is read: a second
        # process waits (busy timeout) and then finds nothing left to do.
        connection.exec_driver_sql("BEGIN IMMEDIATE")
    with context.begin_transaction():
        if not sqlite:
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
        context.run_migrations()
        if sqlite:
            broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
            if broken:
                raise RuntimeError(f"the migration left rows whose foreign keys point nowhere: {broken[:5]}")


async def run_migrations_online() -> None:
    engine = create_engine(database_url, poolclass=pool.NullPool)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_run_on)
            await connection.commit()
    finally:
        await engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    asyncio.run(run_migrations_online())
