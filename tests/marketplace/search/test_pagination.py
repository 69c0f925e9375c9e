"""Pages by offset and by cursor: every match once, in the expected order, with either strategy.

The expected order is computed here from geopy distances and the documented score, never by
the code under test. ``strategy`` forces each way the search can read a nearest-first page:
"text first" (few matches: distances only for suppliers with a match) and "rings" (many
matches: ring by ring of distance; the ring width is shrunk so a walk crosses many rings).
The PostgreSQL run (the `*_postgres.py` modules beside this one) repeats every test on a real server.
"""

from __future__ import annotations

import random

import pytest
from geopy.distance import geodesic
from sqlalchemy import text

from marketplace.search import plans
from tests.marketplace.support import (
    JAKARTA,
    READ,
    WRITE,
    add_product,
    add_supplier,
    client,
    database_url,
    fake_engine,
    field_of,
    make_settings,
    running_app,
    settings,
)

LOCATION = f"{JAKARTA[0]},{JAKARTA[1]}"


def point_at(km: float, bearing: float) -> tuple[float, float]:
    destination = geodesic(kilometers=km).destination(JAKARTA, bearing)
    return round(destination.latitude, 6), round(destination.longitude, 6)


@pytest.fixture
async def coffee(client) -> dict[int, tuple[float, int]]:
    """Suppliers 0.5-300 km from Jakarta, two or three coffees each: {product id: (km, score)}.

    "Kopi ..." names score 3; "Biji sangrai" with kopi in the description scores 1; some
    suppliers share a distance band so rows tie on distance and follow by score, then id.
    """
    rng = random.Random(11)
    expected = {}
    for index in range(18):
        km = rng.choice([0.5, 3, 8, 12, 40, 90, 300]) + rng.uniform(0, 2)
        lat, lng = point_at(km, rng.uniform(0, 360))
        supplier = await add_supplier(client, lat=lat, lng=lng, name=f"Kedai {index}")
        distance = geodesic(JAKARTA, (lat, lng)).km
        for name, description, score in [("Kopi Gayo", "", 3), ("Biji sangrai", "kopi pilihan", 1),
                                         ("Kopi Toraja", "", 3)][: 2 + index % 2]:
            product = await add_product(client, supplier_id=supplier["id"], name=name, description=description,
                                        category="makanan")
            expected[product["id"]] = (distance, score)
    return expected


def nearest_order(expected: dict[int, tuple[float, int]]) -> list[int]:
    return sorted(expected, key=lambda pid: (round(expected[pid][0], 9), -expected[pid][1], pid))


@pytest.fixture(params=["text first", "rings"])
def strategy(request, monkeypatch) -> str:
    if request.param == "rings":
        monkeypatch.setattr(plans, "TOTAL_CAP", 1)  # every search counts as broad
        monkeypatch.setattr(plans, "RING_START_KM", 0.7)  # and crosses many rings
    return request.param


async def get(client, **params) -> dict:
    response = await client.get("/api/products/search", params=params, headers=READ)
    assert response.status_code == 200, response.text
    return response.json()


async def walk(client, **params) -> tuple[list[int], list[dict]]:
    """Every page by cursor, from page 1 until next_cursor is null."""
    pages = [await get(client, **params)]
    while pages[-1]["next_cursor"] is not None:
        assert len(pages) < 50, "the cursor never ended"
        pages.append(await get(client, **params, cursor=pages[-1]["next_cursor"]))
    return [hit["product"]["id"] for page in pages for hit in page["results"]], pages


async def test_a_cursor_walk_returns_every_match_once_in_nearest_order(client, coffee, strategy):
    ids, pages = await walk(client, q="kopi", location=LOCATION, limit=4)
    assert ids == nearest_order(coffee)
    assert [page["offset"] for page in pages] == list(range(0, len(coffee), 4))
    assert pages[-1]["next_cursor"] is None and len(pages[-1]["results"]) <= 4
    for page in pages:
        for hit in page["results"]:
            assert hit["distance_km"] == pytest.approx(coffee[hit["product"]["id"]][0], abs=1e-3)


async def test_offset_pages_agree_with_the_cursor_walk(client, coffee, strategy):
    by_offset = []
    for offset in range(0, len(coffee) + 5, 5):
        page = await get(client, q="kopi", location=LOCATION, limit=5, offset=offset)
        by_offset += [hit["product"]["id"] for hit in page["results"]]
    assert by_offset == nearest_order(coffee)


async def test_a_cursor_walk_within_a_radius(client, coffee, strategy):
    ids, _ = await walk(client, q="kopi", location=LOCATION, radius_km=50, limit=3, fallback="false")
    assert ids == [pid for pid in nearest_order(coffee) if coffee[pid][0] <= 50]


async def test_a_cursor_walk_by_price_and_without_location(client, coffee):
    prices = {}
    for index, pid in enumerate(sorted(coffee)):
        price = 1000 * (index % 4)  # ties on price: distance, score, then id decide
        prices[pid] = price
        await client.put(f"/api/products/{pid}", json={"price": price},
                         headers=WRITE)
    ids, _ = await walk(client, q="kopi", location=LOCATION, sort="price_asc", limit=4)
    assert ids == sorted(coffee, key=lambda pid: (prices[pid], round(coffee[pid][0], 9), -coffee[pid][1], pid))
    ids, _ = await walk(client, q="kopi", limit=4)
    assert ids == sorted(coffee, key=lambda pid: (-coffee[pid][1], pid))


async def test_beyond_the_cap_the_total_says_so_and_the_walk_still_ends(client, coffee, monkeypatch):
    monkeypatch.setattr(plans, "TOTAL_CAP", 20)
    ids, pages = await walk(client, q="kopi", location=LOCATION, limit=6)
    assert ids == nearest_order(coffee)
    assert all(page["total"] == 20 and page["total_exact"] is False for page in pages)
    within = sum(1 for km, _ in coffee.values() if km <= 2.6)
    assert 0 < within <= 20
    exact = await get(client, q="kopi", location=LOCATION, radius_km=2.6, fallback="false")
    assert exact["total_exact"] is True and exact["total"] == within


async def test_a_page_after_a_fallback_continues_the_relaxed_search(client, coffee):
    first = await get(client, q="kopi luwak", location=LOCATION, limit=4)
    assert first["fallback"] == ["matched_any_term"]
    second = await get(client, q="kopi luwak", location=LOCATION, limit=4, cursor=first["next_cursor"])
    assert second["fallback"] == ["matched_any_term"]
    ids = [hit["product"]["id"] for page in (first, second) for hit in page["results"]]
    assert ids == nearest_order(coffee)[:8]


async def test_bad_cursors_are_422_naming_the_field(client, coffee):
    page = await get(client, q="kopi", location=LOCATION, limit=4)
    token = page["next_cursor"]
    payload, tag = token.split(".")
    flipped = payload[:-3] + ("A" if payload[-3] != "A" else "B") + payload[-2:]
    cases = [
        ({"cursor": f"{flipped}.{tag}"}, "not valid"),  # edited: the signature no longer matches
        ({"cursor": "not-a-cursor"}, "not valid"),
        ({"cursor": token, "q": "teh"}, "another search"),  # the cursor of a different search
        ({"cursor": token, "location": "-7.25,112.75"}, "another search"),
        ({"cursor": token, "offset": 4}, "either offset or cursor"),
        ({"cursor": "x" * 5000}, "at most 4096"),
    ]
    for params, message in cases:
        response = await client.get("/api/products/search", headers=READ,
                                    params={"q": "kopi", "location": LOCATION, "limit": 4, **params})
        assert response.status_code == 422, params
        assert field_of(response) == ["cursor"]
        assert message in response.json()["detail"][0]["msg"], response.json()


async def test_a_cursor_works_on_every_worker_and_after_a_restart(client, coffee, settings):
    page = await get(client, q="kopi", location=LOCATION, limit=4)
    async with running_app(settings) as other_worker:  # the same database: the same signing key
        second = await get(other_worker, q="kopi", location=LOCATION, limit=4, cursor=page["next_cursor"])
    assert [hit["product"]["id"] for hit in second["results"]] == nearest_order(coffee)[4:8]


async def test_a_cursor_from_another_database_is_refused(client, coffee, tmp_path, fake_engine):
    page = await get(client, q="kopi", location=LOCATION, limit=4)
    elsewhere = make_settings(database_url=f"sqlite+aiosqlite:///{tmp_path}/other.db",
                              vllm_base_url=fake_engine.base_url)
    async with running_app(elsewhere) as other:
        response = await other.get("/api/products/search", headers=READ,
                                   params={"q": "kopi", "location": LOCATION, "limit": 4, "cursor": page["next_cursor"]})
    assert response.status_code == 422 and field_of(response) == ["cursor"]


async def test_ai_search_pages_by_cursor(client, coffee):
    body = {"query": "kopi", "location": {"lat": JAKARTA[0], "lng": JAKARTA[1]}, "radius_km": 400, "limit": 4}
    first = (await client.post("/api/products/ai-search", json=body, headers=READ)).json()
    second = await client.post("/api/products/ai-search", json={**body, "cursor": first["next_cursor"]}, headers=READ)
    assert second.status_code == 200, second.text
    second = second.json()
    assert second["parsed"] == first["parsed"] and second["offset"] == 4
    ids = [hit["product"]["id"] for page in (first, second) for hit in page["results"]]
    assert ids == nearest_order(coffee)[:8]
    changed = await client.post("/api/products/ai-search", headers=READ,
                                json={**body, "query": "teh", "cursor": first["next_cursor"]})
    assert changed.status_code == 422 and field_of(changed) == ["cursor"]
    both = await client.post("/api/products/ai-search", headers=READ,
                             json={**body, "offset": 4, "cursor": first["next_cursor"]})
    assert both.status_code == 422 and field_of(both) == ["cursor"]


async def test_a_supplier_without_its_unit_vector_is_still_found_in_order(client, coffee, strategy):
    # A row written around the application: only slower to search, never wrong.
    async with client.app.state.marketplace.db_factory() as db:
        await db.execute(text("UPDATE suppliers SET ux = NULL, uy = NULL, uz = NULL WHERE id % 2 = 0"))
        await db.commit()
    ids, _ = await walk(client, q="kopi", location=LOCATION, limit=5)
    assert ids == nearest_order(coffee)
    ids, _ = await walk(client, q="kopi", location=LOCATION, radius_km=20, limit=5, fallback="false")
    assert ids == [pid for pid in nearest_order(coffee) if coffee[pid][0] <= 20]
