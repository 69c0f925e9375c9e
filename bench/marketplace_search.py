"""Marketplace search latency on 100k products, on SQLite and on a throw-away PostgreSQL.

    python -m bench.marketplace_search [--products 100000] [--suppliers 2000] [--runs 200]

Loads the same synthetic catalogue (the demo templates, suppliers spread around
twelve Indonesian cities) into a fresh SQLite file and a fresh PostgreSQL
cluster, migrates both with the app's own migrations, then times
``marketplace.search.search_products`` (what the search route runs: the SQL,
ORM loading, geopy distances and delivery estimates of the page) for:

- near+text+price, page 1: "laptop gaming" under 20 juta within 50 km of a city
- near+text+price, deep page: "original" under 5 juta, nearest first with no
  radius, offset 10,000
- nearest, no radius, page 1: "kopi" anywhere, nearest first (distance to every supplier)

Each query runs ``--runs`` times from jittered city centres (after a warm-up);
p50/p99 in milliseconds go to stdout and bench/results/marketplace_search.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import tempfile
import time
from pathlib import Path

from sqlalchemy import insert, text

from bench.postgres import throwaway_postgres
from bench.stats import percentile
from marketplace import geo
from marketplace.db import create_engine, create_sessionmaker, migrate
from marketplace.models import Product, Supplier, tags_text_for, utcnow
from marketplace.search import SearchCriteria, search_products
from marketplace.seed import CITIES, TEMPLATES

RESULTS = Path(__file__).resolve().parent / "results"
BATCH = 5000
QUALIFIERS = ("Original", "Second", "Bekas", "Garansi Resmi", "Promo", "Import", "Lokal", "Premium")


def catalogue(*, suppliers: int, products: int, seed: int = 1) -> tuple[list[dict], list[dict]]:
    """Synthetic suppliers (ids 1..n) and products, deterministic for a seed."""
    rng = random.Random(seed)
    now = utcnow()
    supplier_rows = []
    for i in range(suppliers):
        _, lat, lng = CITIES[i % len(CITIES)]
        supplier_rows.append({
            "id": i + 1, "name": f"Toko {i}", "business_name": f"CV {i}", "address": "", "contact": "",
            "lat": lat + rng.uniform(-0.4, 0.4), "lng": lng + rng.uniform(-0.4, 0.4),
            "registration_date": now, "active": True,
        })
    templates = [(category, t) for category, items in TEMPLATES.items() for t in items]
    product_rows = []
    for i in range(products):
        category, (name, low, high, tags, description) = rng.choice(templates)
        qualifier = rng.choice(QUALIFIERS)
        product_tags = [*tags, qualifier.lower()]
        product_rows.append({
            "supplier_id": rng.randint(1, suppliers),
            "name": f"{name} {qualifier}",
            "description": f"{description} Barang {qualifier.lower()}, kondisi {'original' if i % 2 else 'baik'}.",
            "price": rng.randint(low, high) // 500 * 500,
            "stock_quantity": 0 if rng.random() < 0.1 else rng.randint(1, 80),
            "category": category,
            "tags": product_tags,
            "tags_text": tags_text_for(product_tags),
            "created_at": now,
            "updated_at": now,
        })
    return supplier_rows, product_rows


async def load(url: str, suppliers: list[dict], products: list[dict]) -> float:
    """Migrate ``url`` and bulk-insert the catalogue; returns the seconds taken."""
    started = time.perf_counter()
    await migrate(url)
    engine = create_engine(url)
    try:
        async with engine.begin() as connection:
            await connection.execute(insert(Supplier), suppliers)
            for start in range(0, len(products), BATCH):
                await connection.execute(insert(Product), products[start:start + BATCH])
            if engine.dialect.name == "postgresql":
                await connection.execute(text("SELECT setval('suppliers_id_seq', (SELECT max(id) FROM suppliers))"))
        async with engine.connect() as connection:
            await connection.execute(text("ANALYZE"))
            await connection.commit()
    finally:
        await engine.dispose()
    return time.perf_counter() - started


def queries(rng: random.Random) -> dict[str, callable]:
    def origin() -> geo.Point:
        _, lat, lng = rng.choice(CITIES)
        return geo.Point(lat + rng.uniform(-0.1, 0.1), lng + rng.uniform(-0.1, 0.1))

    return {
        "near+text+price, page 1": lambda: SearchCriteria(
            terms=("laptop", "gaming"), max_price=20_000_000, location=origin(), radius_km=50, in_stock=True,
            limit=20),
        "near+text+price, deep page (offset 10000)": lambda: SearchCriteria(
            terms=("original",), max_price=5_000_000, location=origin(), limit=20, offset=10_000),
        "nearest anywhere, page 1": lambda: SearchCriteria(terms=("kopi",), location=origin(), limit=20),
    }


async def measure(url: str, *, runs: int, warmup: int = 5) -> dict[str, dict]:
    engine = create_engine(url, pool_size=2)
    sessions = create_sessionmaker(engine)
    results = {}
    try:
        for name, make in queries(random.Random(42)).items():
            timings, totals = [], []
            for i in range(warmup + runs):
                criteria = make()
                async with sessions() as session:
                    started = time.perf_counter()
                    page = await search_products(session=session, criteria=criteria, fallback=False)
                    elapsed = time.perf_counter() - started
                if i >= warmup:
                    timings.append(elapsed * 1000)
                    totals.append(page.total)
            assert any(totals), f"{name}: the query matched nothing; the benchmark would measure nothing"
            results[name] = {"p50_ms": percentile(timings, 50), "p99_ms": percentile(timings, 99),
                             "median_matches": sorted(totals)[len(totals) // 2], "runs": runs}
    finally:
        await engine.dispose()
    return results


def markdown(report: dict) -> str:
    lines = [f"Marketplace search, {report['products']:,} products from {report['suppliers']:,} suppliers "
             f"({report['runs']} runs per query)", "",
             "| query | SQLite p50 | SQLite p99 | PostgreSQL p50 | PostgreSQL p99 | matches (median) |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, sqlite in report["sqlite"]["queries"].items():
        pg = report["postgresql"]["queries"][name]
        lines.append(f"| {name} | {sqlite['p50_ms']:.1f} ms | {sqlite['p99_ms']:.1f} ms | {pg['p50_ms']:.1f} ms | "
                     f"{pg['p99_ms']:.1f} ms | {sqlite['median_matches']:,} |")
    lines += ["", f"Load (migrate + insert + ANALYZE): SQLite {report['sqlite']['load_s']:.1f} s, "
              f"PostgreSQL {report['postgresql']['load_s']:.1f} s. Machine: {report['cpus']} CPUs, "
              f"load average {report['loadavg_start']:.1f} at start, {report['loadavg_end']:.1f} at end "
              "(other processes share these CPUs: compare figures taken at similar load)."]
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> dict:
    suppliers, products = catalogue(suppliers=args.suppliers, products=args.products)
    report = {"products": args.products, "suppliers": args.suppliers, "runs": args.runs,
              "cpus": os.cpu_count(), "loadavg_start": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(prefix="bench-market-") as directory:
        url = f"sqlite+aiosqlite:///{directory}/bench.db"
        load_s = await load(url, suppliers, products)
        report["sqlite"] = {"load_s": load_s, "queries": await measure(url, runs=args.runs)}
    async with throwaway_postgres() as cluster:
        load_s = await load(cluster.dsn, suppliers, products)
        report["postgresql"] = {"load_s": load_s, "queries": await measure(cluster.dsn, runs=args.runs)}
    report["loadavg_end"] = os.getloadavg()[0]
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--products", type=int, default=100_000)
    parser.add_argument("--suppliers", type=int, default=2_000)
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    report = asyncio.run(main_async(args))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "marketplace_search.json").write_text(json.dumps(report, indent=2) + "\n")
    table = markdown(report)
    (RESULTS / "marketplace_search.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
