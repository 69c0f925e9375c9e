"""The marketplace search benchmark end to end on a small catalogue (SQLite): load, every query, the table.

Real runs (a million products, both databases) are in bench/results/marketplace_search.md;
this keeps the measuring path from rotting.
"""

from __future__ import annotations

import argparse
import random

import pytest

from bench import marketplace_search as bench
from marketplace.catalogue import taxonomy


def test_the_catalogue_is_deterministic_and_uses_category_paths():
    first = bench.catalogue(suppliers=30, products=500)
    suppliers, products = first
    assert [p["name"] for p in products] == [p["name"] for p in bench.catalogue(suppliers=30, products=500)[1]]
    assert {p["category"] for p in products} <= set(taxonomy.NODES)
    assert any("/" in p["category"] for p in products)
    assert all(s["ux"] ** 2 + s["uy"] ** 2 + s["uz"] ** 2 == pytest.approx(1) for s in suppliers)


async def test_every_query_runs_and_the_table_lists_it():
    args = argparse.Namespace(products=3000, suppliers=60, runs=2, databases="sqlite")
    report = await bench.main_async(args)
    measured = report["sqlite"]["queries"]
    assert set(measured) == set(bench.queries(random.Random(1)))
    assert all(numbers["median_matches"] > 0 for numbers in measured.values())
    table = bench.markdown(report)
    for name in measured:
        assert f"| {name} |" in table
    assert "PostgreSQL" in table and "| - |" in table  # no PostgreSQL run: its cells say so


async def test_queries_may_be_measured_again_alone():
    args = argparse.Namespace(products=3000, suppliers=60, runs=2, databases="sqlite", queries="cursor,nearest")
    measured = (await bench.main_async(args))["sqlite"]["queries"]
    assert set(measured) == {f"deep page by cursor (after row {bench.DEEP_OFFSET:,})", "nearest anywhere, page 1"}
