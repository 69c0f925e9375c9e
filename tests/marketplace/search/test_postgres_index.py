"""PostgreSQL specifics: the migration's extensions, and the search's statements using its indexes.

The statements are the ones ``search_products`` really sends (captured as it runs), planned
again with sequential and plain index scans ruled out: what remains shows which indexes
their conditions can use (index *usability*, not the planner's cost choice at this size).
"""

from __future__ import annotations

import pytest
from sqlalchemy import event, insert, text

from marketplace.catalogue.models import Product, Supplier
from marketplace.database.engines import create_engine, create_sessionmaker
from marketplace.database.tables import utcnow
from marketplace.migrations.runner import migrate
from marketplace.places import geo
from marketplace.search.criteria import SearchCriteria
from marketplace.search.service import search_products

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


@pytest.fixture
async def catalogue(postgres_database_url):
    await migrate(postgres_database_url)
    engine = create_engine(postgres_database_url)
    now = utcnow()
    async with engine.begin() as connection:
        extensions = set((await connection.execute(text("SELECT extname FROM pg_extension"))).scalars())
        assert {"cube", "earthdistance", "pg_trgm"} <= extensions
        await connection.execute(insert(Supplier), [
            {"name": f"s{i}", "business_name": "b", "lat": -8 + (i % 100) * 0.1, "lng": 105 + (i // 100) * 0.1,
             "address": "", "contact": "", "registration_date": now, "active": True}
            for i in range(3000)
        ])
        await connection.execute(insert(Product), [
            {"supplier_id": 1 + i % 3000, "name": "Kopi Gayo" if i % 500 == 0 else f"Barang nomor {i}",
             "description": "HP bekas" if i % 700 == 0 else f"deskripsi barang {i}", "price": 1000 + i,
             "stock_quantity": 1, "category": "hobi", "tags": [], "tags_text": "|", "created_at": now,
             "updated_at": now}
            for i in range(20000)
        ])
        await connection.execute(text("ANALYZE"))
    yield engine
    await engine.dispose()


async def plans_of(engine, criteria: SearchCriteria) -> list[str]:
    """The plans of every statement a search sends, with sequential and plain index scans off."""
    sent: list[tuple[str, tuple]] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        sent.append((statement, tuple(parameters)))

    event.listen(engine.sync_engine, "before_cursor_execute", record)
    try:
        async with create_sessionmaker(engine)() as db:
            page = await search_products(db=db, criteria=criteria, fallback=False)
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", record)
    assert page.total > 0
    plans = []
    async with engine.connect() as connection:
        raw = (await connection.get_raw_connection()).driver_connection
        async with raw.transaction():
            await raw.execute("SET LOCAL enable_seqscan = off")
            await raw.execute("SET LOCAL enable_indexscan = off")
            for statement, parameters in sent:
                rows = await raw.fetch(f"EXPLAIN {statement}", *parameters)
                plans.append("\n".join(row[0] for row in rows))
    return plans


async def test_a_radius_search_uses_the_earth_index(catalogue):
    criteria = SearchCriteria(terms=("kopi",), location=geo.Point(-7.95, 105.05), radius_km=25, max_price=10**6)
    plans = "\n".join(await plans_of(catalogue, criteria))
    assert "ix_suppliers_earth" in plans, plans


async def test_a_text_search_uses_the_trigram_indexes(catalogue):
    plans = "\n".join(await plans_of(catalogue, SearchCriteria(terms=("kopi",), max_price=10**6)))
    for index in ("ix_products_name_trgm", "ix_products_description_trgm", "ix_products_tags_trgm"):
        assert index in plans, plans


async def test_a_two_letter_word_uses_the_word_index(catalogue):
    plans = "\n".join(await plans_of(catalogue, SearchCriteria(terms=("hp",))))
    assert "ix_products_words" in plans, plans
