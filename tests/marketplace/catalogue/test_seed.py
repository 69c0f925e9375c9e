"""The demo catalogue: deterministic, loaded once, by the command and by the first start."""

from __future__ import annotations

import asyncio
import collections
import subprocess
import sys

from marketplace.catalogue import taxonomy
from marketplace.catalogue.demo import CITIES, demo_catalogue, seed_if_empty
from marketplace.database.engines import create_engine, create_sessionmaker
from marketplace.migrations.runner import migrate
from tests.marketplace.support import (
    READ,
    count_rows,
    database_url,
    fake_engine,
    make_settings,
    running_app,
)


def test_the_catalogue_is_deterministic_and_realistic():
    catalogue = demo_catalogue()
    assert catalogue == demo_catalogue()
    assert demo_catalogue(seed=1) != catalogue
    products = [p for s in catalogue for p in s.products]
    assert 250 <= len(products) <= 500
    assert {p["category"] for p in products} <= set(taxonomy.NODES)
    assert {p["category"].split("/")[0] for p in products} == set(taxonomy.TOP_LEVEL)
    assert len({p["category"] for p in products}) >= 30  # nearly every template names a subcategory
    assert {p["category"] for p in products if p["name"].startswith("Laptop")} == {"elektronik/laptop"}
    assert {p["category"] for p in products if p["name"].startswith("Xiaomi")} == {"elektronik/smartphone"}
    assert {s.address.rsplit(", ", 1)[1] for s in catalogue} == {name for name, _, _ in CITIES}
    assert all(p["price"] > 0 and p["price"] % 500 == 0 for p in products)
    laptops = [p["price"] for p in products if p["name"].startswith("Laptop Gaming ASUS")]
    assert laptops and all(15_000_000 <= price <= 21_000_000 for price in laptops)
    by_name = collections.Counter(p["name"] for p in products)
    assert by_name.most_common(1)[0][1] >= 3  # the same product from several suppliers: comparable


async def test_seed_if_empty_loads_once(database_url):
    await migrate(database_url)
    engine = create_engine(database_url)
    sessions = create_sessionmaker(engine)
    try:
        first, second = await asyncio.gather(
            seed_if_empty(db_factory=sessions), seed_if_empty(db_factory=sessions)
        )
        added = [result for result in (first, second) if result is not None]
        catalogue = demo_catalogue()
        assert added == [(len(catalogue), sum(len(s.products) for s in catalogue))]
        assert await seed_if_empty(db_factory=sessions) is None
    finally:
        await engine.dispose()


async def test_first_start_seeds_when_asked(database_url, fake_engine, monkeypatch):
    monkeypatch.setenv("SEED_DEMO_DATA", "true")  # the marketplace reads its own settings from the environment
    settings = make_settings(database_url=database_url, vllm_base_url=fake_engine.base_url)
    async with running_app(settings) as client:
        assert await count_rows(client, "suppliers") == len(demo_catalogue())
        found = (await client.get("/api/products/search", headers=READ,
                                  params={"q": "laptop gaming", "location": "-6.2088,106.8456"})).json()
        assert found["results"] and found["results"][0]["supplier"]["address"].endswith("Jakarta")
    async with running_app(settings) as client:  # a restart does not seed again
        assert await count_rows(client, "suppliers") == len(demo_catalogue())


async def test_no_seed_unless_asked(database_url, fake_engine):
    settings = make_settings(database_url=database_url, vllm_base_url=fake_engine.base_url)
    async with running_app(settings) as client:
        assert await count_rows(client, "suppliers") == 0


async def test_seed_command(database_url):
    command = [sys.executable, "-m", "marketplace.seed", "--database-url", database_url]
    first = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith(f"seeded {len(demo_catalogue())} suppliers")
    again = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "nothing seeded" in again.stdout
