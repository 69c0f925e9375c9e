"""Database plumbing: URLs, SQLite connection settings, migrations that match the models."""

from __future__ import annotations

import asyncio
import random
import sys
import traceback

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from geopy.distance import geodesic
from sqlalchemy import insert, inspect, text
from sqlalchemy.exc import IntegrityError

from marketplace.chat.models import Message
from marketplace.database.engines import create_engine, database_kind, normalize_url
from marketplace.database.tables import utcnow
from marketplace.migrations.runner import VERSION_TABLE, head_revision, migrate
from marketplace.migrations.schema import metadata
from marketplace.places.geodesy import vincenty_km
from tests.marketplace.support import database_url

# Created by the PostgreSQL migration for search, on purpose not described by the models.
DATABASE_ONLY_INDEXES = {"ix_suppliers_earth", "ix_products_name_trgm", "ix_products_description_trgm",
                         "ix_products_tags_trgm", "ix_products_words"}
# SQLite's FTS5 index of products (a virtual table and its shadow tables), also not modelled.
DATABASE_ONLY_TABLES = {"products_fts", "products_fts_data", "products_fts_idx", "products_fts_docsize",
                        "products_fts_config"}
# PostgreSQL's stored word vector (products.words), the same.
DATABASE_ONLY_COLUMNS = {("products", "words")}


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite:///./data/x.db", "sqlite+aiosqlite:///./data/x.db"),
        ("sqlite+aiosqlite:///x.db", "sqlite+aiosqlite:///x.db"),
        ("postgresql://u:p%40ss@h:5432/db", "postgresql+asyncpg://u:p%40ss@h:5432/db"),
        ("postgres://u@h/db", "postgresql+asyncpg://u@h/db"),
    ],
)
def test_urls_get_the_async_driver(url, expected):
    assert normalize_url(url) == expected


def test_other_databases_are_refused_naming_the_setting():
    with pytest.raises(ValueError, match="database_url"):
        normalize_url("mysql://u@h/db")
    assert database_kind("sqlite:///x.db") == "sqlite"


async def _differences(url: str) -> list:
    engine = create_engine(url)
    try:
        async with engine.connect() as connection:
            def compare(sync_connection):
                context = MigrationContext.configure(sync_connection, opts={"compare_type": True, "version_table": VERSION_TABLE})
                return compare_metadata(context, metadata)

            diffs = await connection.run_sync(compare)
    finally:
        await engine.dispose()
    return [d for d in diffs if not (d[0] == "remove_index" and d[1].name in DATABASE_ONLY_INDEXES)
            and not (d[0] == "remove_table" and d[1].name in DATABASE_ONLY_TABLES)
            and not (d[0] == "remove_column" and (d[2], d[3].name) in DATABASE_ONLY_COLUMNS)]


async def test_migrations_create_what_the_models_describe_and_run_twice(database_url):
    await migrate(database_url)
    await migrate(database_url)  # idempotent: a restart migrates nothing
    assert await _differences(database_url) == []
    engine = create_engine(database_url)
    try:
        async with engine.connect() as connection:
            version = await connection.scalar(text(f"SELECT version_num FROM {VERSION_TABLE}"))
            tables = await connection.run_sync(lambda c: set(inspect(c).get_table_names()))
    finally:
        await engine.dispose()
    assert version == head_revision() == "0006"
    assert {"suppliers", "products", "users", "conversations", "messages", "user_tokens"} <= tables


async def test_geodesic_km_in_sql_matches_geopy(database_url):
    await migrate(database_url)
    engine = create_engine(database_url)
    pairs = [((-6.2088, 106.8456), (-7.2575, 112.7521)), ((3.5952, 98.6722), (-8.6705, 115.2126)),
             ((0.0, 100.0), (0.0, 100.5)), ((-6.2, 106.8), (-6.2, 106.8))]
    try:
        async with engine.connect() as connection:
            for a, b in pairs:
                km = await connection.scalar(text("SELECT geodesic_km(:a, :b, :c, :d)"),
                                             {"a": a[0], "b": a[1], "c": b[0], "d": b[1]})
                assert km == pytest.approx(geodesic(a, b).km, abs=1e-6)
    finally:
        await engine.dispose()


async def test_sqlite_connections_use_wal_and_enforce_foreign_keys(tmp_path):
    url = f"sqlite:///{tmp_path}/nested/dir/m.db"
    await migrate(url)  # creates the missing directory
    engine = create_engine(url)
    try:
        async with engine.connect() as connection:
            assert await connection.scalar(text("PRAGMA journal_mode")) == "wal"
            assert await connection.scalar(text("PRAGMA foreign_keys")) == 1
            with pytest.raises(Exception, match="FOREIGN KEY"):
                await connection.execute(text(
                    "INSERT INTO products (supplier_id, name, description, price, stock_quantity, category, "
                    "tags, tags_text, created_at, updated_at) VALUES (99, 'x', '', 1, 1, 'hobi', '[]', '|', "
                    "'2026-01-01', '2026-01-01')"))
    finally:
        await engine.dispose()


def test_vincenty_agrees_with_geopy_to_a_tenth_of_a_millimetre():
    rng = random.Random(3)
    for _ in range(2000):
        a = (rng.uniform(-89, 89), rng.uniform(-180, 180))
        b = (rng.uniform(-89, 89), rng.uniform(-180, 180))
        assert vincenty_km(*a, *b) == pytest.approx(geodesic(a, b).km, abs=1e-7)
    assert vincenty_km(-6.2, 106.8, -6.2, 106.8) == 0.0
    assert vincenty_km(None, 106.8, -6.2, 106.8) is None
    # Nearly antipodal: Vincenty does not converge; the great-circle fallback is within 0.5 %.
    assert vincenty_km(0, 0, 0.5, 179.7) == pytest.approx(geodesic((0, 0), (0.5, 179.7)).km, rel=5e-3)


MIGRATE = "import asyncio, sys; from marketplace.migrations.runner import migrate; asyncio.run(migrate(sys.argv[1]))"


async def test_workers_starting_together_migrate_once(database_url):
    processes = [
        await asyncio.create_subprocess_exec(sys.executable, "-c", MIGRATE, database_url,
                                             stderr=asyncio.subprocess.PIPE)
        for _ in range(3)
    ]
    results = [await p.communicate() for p in processes]
    assert [p.returncode for p in processes] == [0, 0, 0], [err.decode()[-500:] for _, err in results]
    await asyncio.gather(migrate(database_url), migrate(database_url))  # and threads of one process
    assert await _differences(database_url) == []


async def test_database_errors_carry_no_bound_values_into_logs(database_url):
    """Chat text in a failing statement never reaches the exception message or its traceback.

    (A unique violation's DETAIL line from PostgreSQL itself names the duplicate key, e.g. an
    email; the users route turns that one into a 409 without logging it.)
    """
    await migrate(database_url)
    engine = create_engine(database_url)
    message = {"conversation_id": 4242, "role": "user", "content": "alamat rumah saya di Jl. Rahasia 7",
               "timestamp": utcnow(), "details": {"parsed": {"terms": ["rahasia"]}}}
    try:
        with pytest.raises(IntegrityError) as caught:  # no conversation 4242: a foreign-key violation
            async with engine.begin() as connection:
                await connection.execute(insert(Message), [message])
    finally:
        await engine.dispose()
    logged = "".join(traceback.format_exception(caught.value))
    assert "INSERT INTO messages" in logged  # the statement is still there to debug with
    assert "Rahasia" not in logged and "rahasia" not in logged
