"""PostgreSQL specifics: the migration's extensions, and the search using the GiST and trigram indexes."""

from __future__ import annotations

import pytest
from sqlalchemy import insert, text
from sqlalchemy.dialects import postgresql

from marketplace import geo
from marketplace.db import create_engine, migrate
from marketplace.models import Product, Supplier, utcnow
from marketplace.search import SearchCriteria, build_query

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


async def test_distance_search_uses_the_earth_gist_index(postgres_database_url):
    await migrate(postgres_database_url)
    engine = create_engine(postgres_database_url)
    try:
        async with engine.begin() as connection:
            extensions = set((await connection.execute(text("SELECT extname FROM pg_extension"))).scalars())
            assert {"cube", "earthdistance", "pg_trgm"} <= extensions
            now = utcnow()
            await connection.execute(insert(Supplier), [
                {"name": f"s{i}", "business_name": "b", "lat": -8 + (i % 100) * 0.1, "lng": 105 + (i // 100) * 0.1,
                 "address": "", "contact": "", "registration_date": now, "active": True}
                for i in range(3000)
            ])
            await connection.execute(insert(Product), [
                {"supplier_id": 1 + i % 3000, "name": "Kopi Gayo" if i % 500 == 0 else f"Barang nomor {i}",
                 "description": f"deskripsi barang {i}", "price": 1000 + i, "stock_quantity": 1, "category": "hobi",
                 "tags": [], "tags_text": "|", "created_at": now, "updated_at": now}
                for i in range(20000)
            ])
            await connection.execute(text("ANALYZE"))
            await connection.execute(text("SET LOCAL enable_seqscan = off"))
            criteria = SearchCriteria(terms=("kopi",), location=geo.Point(-6.2, 106.8), radius_km=25, max_price=10**6)
            query = build_query(criteria, dialect="postgresql").compile(
                dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True})
            plan = "\n".join((await connection.execute(text(f"EXPLAIN {query}"))).scalars())
            text_only = build_query(SearchCriteria(terms=("kopi",)), dialect="postgresql").compile(
                dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True})
            # Index *usability* (not the planner's cost choice at this size): rule out the
            # sequential and plain index scans, leaving bitmap scans of matching indexes.
            await connection.execute(text("SET LOCAL enable_indexscan = off"))
            text_plan = "\n".join((await connection.execute(text(f"EXPLAIN {text_only}"))).scalars())
    finally:
        await engine.dispose()
    assert "ix_suppliers_earth" in plan, plan
    # The text conditions match the trigram indexes' expressions.
    for index in ("ix_products_name_trgm", "ix_products_description_trgm", "ix_products_tags_trgm"):
        assert index in text_plan, text_plan
