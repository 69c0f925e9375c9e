"""How terms match text, the same on both databases: partial words from three characters,
whole words for two, ASCII case folding only; and the text indexes follow every write.

Expected matches come from ``reference_match`` below (the documented rule written in plain
Python), never from the code under test.
"""

from __future__ import annotations

import pytest
from sqlalchemy import select

from marketplace.catalogue.models import Supplier
from marketplace.places import sphere
from tests.marketplace.support import (
    READ,
    WRITE,
    add_product,
    add_supplier,
    client,
    database_url,
    fake_engine,
    settings,
)

ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
WORD = set("abcdefghijklmnopqrstuvwxyz0123456789")


def words(value: str) -> list[str]:
    folded = value.translate(ASCII_LOWER)
    return "".join(ch if ch in WORD else " " for ch in folded).split()


def reference_match(term: str, name: str) -> bool:
    """The rule of docs/marketplace.md: two ASCII letters/digits = a whole word, else anywhere."""
    if len(term) == 2 and set(term) <= WORD:
        return term in words(name)
    return term in name.translate(ASCII_LOWER)


NAMES = [
    "HP Samsung A55", "hp-14 bekas", "(HP) murah", "Casing HP", "php developer book", "shp helm",
    "ÉHP kopi", "TV LED 43", "Smart-TV 4K", "ktv karaoke", "Laptop Gaming", "LAPTOP kantor", "laptops",
    "Kopi CAFÉ", "kopi café", "İstanbul kopi", "Straße Kopi", "KOPI_LUWAK", "4k monitor", "RTX4060 laptop",
    "email sales@hp.com", "www.hp.com/tv", "1e5 hp1 2hp", "0x4k v2.tv",
]
TERMS = ["hp", "tv", "4k", "lap", "laptop", "kopi", "café", "caf", "luwak", "stanbul", "straße", "rtx", "60"]


@pytest.fixture
async def named(client) -> dict[int, str]:
    supplier = await add_supplier(client, lat=-6.2, lng=106.8)
    ids = {}
    for name in NAMES:
        product = await add_product(client, supplier_id=supplier["id"], name=name, category="hobi")
        ids[product["id"]] = name
    return ids


async def found(client, **params) -> set[int]:
    response = await client.get("/api/products/search", params={"fallback": "false", "limit": 100, **params},
                                headers=READ)
    assert response.status_code == 200, response.text
    return {hit["product"]["id"] for hit in response.json()["results"]}


@pytest.mark.parametrize("term", TERMS)
async def test_each_term_finds_what_the_rule_says(client, named, term):
    expected = {pid for pid, name in named.items() if reference_match(term, name)}
    assert await found(client, q=term) == expected  # through the text indexes
    assert await found(client, q=term, location="-6.2,106.8") == expected  # through the suppliers


async def test_two_letter_words_are_whole_words():
    assert reference_match("hp", "hp-14 bekas") and reference_match("hp", "ÉHP kopi")
    assert not reference_match("hp", "php developer book") and not reference_match("hp", "shp helm")


async def test_every_term_of_several_and_any_of_them(client, named):
    both = {pid for pid, name in named.items() if reference_match("hp", name) and reference_match("casing", name)}
    assert await found(client, q="hp casing") == both
    response = await client.get("/api/products/search", params={"q": "hp zzzz", "limit": 100}, headers=READ)
    body = response.json()
    assert body["fallback"] == ["matched_any_term"]
    assert {hit["product"]["id"] for hit in body["results"]} == {
        pid for pid, name in named.items() if reference_match("hp", name)}


async def test_the_indexes_follow_inserts_updates_and_new_tags(client):
    supplier = await add_supplier(client, lat=-6.2, lng=106.8)
    product = await add_product(client, supplier_id=supplier["id"], name="Kopi Gayo", category="kopi")
    assert await found(client, q="gayo") == {product["id"]}
    await client.put(f"/api/products/{product['id']}", json={"name": "Teh Melati"}, headers=WRITE)
    assert await found(client, q="gayo") == set()
    assert await found(client, q="melati") == {product["id"]}
    await client.put(f"/api/products/{product['id']}", json={"description": "seduh tubruk", "tags": ["hp"]},
                     headers=WRITE)
    assert await found(client, q="tubruk") == {product["id"]}
    assert await found(client, q="hp") == {product["id"]}


async def test_registered_suppliers_carry_their_unit_vector(client):
    created = await add_supplier(client, lat=-7.2575, lng=112.7521)
    async with client.app.state.marketplace.db_factory() as db:
        row = (await db.execute(select(Supplier.ux, Supplier.uy, Supplier.uz)
                                     .where(Supplier.id == created["id"]))).one()
    assert tuple(row) == pytest.approx(sphere.unit_vector(-7.2575, 112.7521), abs=1e-15)
