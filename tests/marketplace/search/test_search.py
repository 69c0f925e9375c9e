"""Search: nearest first across pages (checked against geopy), filters, ranking, fallback, AI search, comparison."""

from __future__ import annotations

import random

import pytest
from geopy.distance import geodesic

from tests.marketplace.support import (
    JAKARTA,
    READ,
    add_product,
    add_supplier,
    client,
    database_url,
    fake_engine,
    field_of,
    settings,
)

BANDUNG = (-6.9175, 107.6191)


def point_at(origin: tuple[float, float], km: float, bearing: float) -> tuple[float, float]:
    destination = geodesic(kilometers=km).destination(origin, bearing)
    return round(destination.latitude, 6), round(destination.longitude, 6)


async def search(client, **params) -> dict:
    response = await client.get("/api/products/search", params=params, headers=READ)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture
async def coffee_map(client):
    """Suppliers scattered up to 400 km around Jakarta, each selling coffee; returns {product_id: km}.

    Two of them sit where a spherical distance would order them the wrong way
    round: 100.0 km due north and 100.3 km due east (on a sphere the eastern one
    comes out nearer). Products of one supplier tie on distance and follow by id.
    """
    rng = random.Random(7)
    places = [point_at(JAKARTA, rng.uniform(1, 400), rng.uniform(0, 360)) for _ in range(24)]
    places += [point_at(JAKARTA, 100.0, 0), point_at(JAKARTA, 100.3, 90)]
    distances = {}
    for index, (lat, lng) in enumerate(places):
        supplier = await add_supplier(client, lat=lat, lng=lng, name=f"Kedai {index}")
        for variant in ("Kopi Arabika", "Kopi Robusta"):
            product = await add_product(client, supplier_id=supplier["id"], name=variant, category="makanan")
            distances[product["id"]] = geodesic(JAKARTA, (lat, lng)).km
    return distances


async def test_nearest_first_across_pages_matches_geopy(client, coffee_map):
    location = f"{JAKARTA[0]},{JAKARTA[1]}"
    seen = []
    for offset in range(0, len(coffee_map) + 7, 7):
        page = await search(client, q="kopi", location=location, limit=7, offset=offset)
        assert page["total"] == len(coffee_map)
        assert page["fallback"] == []
        for result in page["results"]:
            expected_km = coffee_map[result["product"]["id"]]
            assert result["distance_km"] == pytest.approx(expected_km, abs=1e-3)
            seen.append(result["product"]["id"])
    expected_order = sorted(coffee_map, key=lambda pid: (round(coffee_map[pid], 9), pid))
    assert seen == expected_order
    # The pair a spherical distance would swap comes out in geodesic order.
    by_km = {round(km, 1): pid for pid, km in coffee_map.items()}
    assert seen.index(by_km[100.0]) < seen.index(by_km[100.3])


async def test_every_result_carries_a_delivery_estimate_from_its_distance(client, coffee_map):
    page = await search(client, q="kopi", location=f"{JAKARTA[0]},{JAKARTA[1]}", limit=100)
    for result in page["results"]:
        km = result["distance_km"]
        delivery = result["delivery"]
        if km <= 20:
            assert delivery == {"min_days": 0, "max_days": 0, "label": "same day"}
        else:
            assert delivery["min_days"] >= 1 and delivery["max_days"] > delivery["min_days"]


async def test_radius_keeps_exactly_the_products_within_it(client):
    inside = await add_supplier(client, lat=point_at(JAKARTA, 49.8, 45)[0], lng=point_at(JAKARTA, 49.8, 45)[1])
    outside = await add_supplier(client, lat=point_at(JAKARTA, 50.3, 45)[0], lng=point_at(JAKARTA, 50.3, 45)[1])
    near = await add_product(client, supplier_id=inside["id"], name="Helm")
    await add_product(client, supplier_id=outside["id"], name="Helm")
    page = await search(client, q="helm", location=f"{JAKARTA[0]},{JAKARTA[1]}", radius_km=50, fallback="false")
    assert [r["product"]["id"] for r in page["results"]] == [near["id"]]
    assert page["total"] == 1 and page["radius_km"] == 50


async def test_filters_price_category_and_stock(client):
    supplier = await add_supplier(client, lat=-6.2, lng=106.8)
    cheap = await add_product(client, supplier_id=supplier["id"], name="Sepatu A", price=150_000, category="fashion")
    await add_product(client, supplier_id=supplier["id"], name="Sepatu B", price=900_000, category="fashion")
    await add_product(client, supplier_id=supplier["id"], name="Sepatu C", price=200_000, category="olahraga")
    sold_out = await add_product(client, supplier_id=supplier["id"], name="Sepatu D", price=180_000,
                                 category="fashion", stock_quantity=0)
    page = await search(client, q="sepatu", max_price=500_000, category="fashion", fallback="false")
    assert sorted(r["product"]["id"] for r in page["results"]) == sorted([cheap["id"], sold_out["id"]])
    page = await search(client, q="sepatu", max_price=500_000, category="fashion", in_stock="true", fallback="false")
    assert [r["product"]["id"] for r in page["results"]] == [cheap["id"]]
    page = await search(client, q="sepatu", min_price=800_000, fallback="false")
    assert [r["product"]["price"] for r in page["results"]] == [900_000]


async def test_without_location_results_are_ranked_by_where_terms_match(client):
    supplier = await add_supplier(client, lat=-6.2, lng=106.8)
    in_description = await add_product(client, supplier_id=supplier["id"], name="Tas", description="cocok untuk laptop")
    in_name = await add_product(client, supplier_id=supplier["id"], name="Laptop Tipis")
    in_tags = await add_product(client, supplier_id=supplier["id"], name="Meja", tags=["laptop"])
    page = await search(client, q="LAPTOP")
    assert [r["product"]["id"] for r in page["results"]] == [in_name["id"], in_tags["id"], in_description["id"]]
    assert [r["score"] for r in page["results"]] == [3, 2, 1]
    assert all(r["distance_km"] is None and r["delivery"] is None for r in page["results"])


async def test_every_term_must_match_unless_nothing_does(client):
    supplier = await add_supplier(client, lat=-6.2, lng=106.8)
    both = await add_product(client, supplier_id=supplier["id"], name="Laptop Gaming")
    one = await add_product(client, supplier_id=supplier["id"], name="Laptop Kantor")
    page = await search(client, q="laptop gaming")
    assert [r["product"]["id"] for r in page["results"]] == [both["id"]]
    page = await search(client, q="laptop murah")  # no product has both words
    assert page["fallback"] == ["matched_any_term"]
    assert sorted(r["product"]["id"] for r in page["results"]) == sorted([both["id"], one["id"]])


async def test_fallback_widens_the_radius_before_dropping_terms(client):
    far = await add_supplier(client, lat=BANDUNG[0], lng=BANDUNG[1])
    near = await add_supplier(client, lat=-6.21, lng=106.85)
    drone = await add_product(client, supplier_id=far["id"], name="Drone DJI", category="hobi")
    await add_product(client, supplier_id=near["id"], name="Gitar", category="hobi")
    page = await search(client, q="drone", location=f"{JAKARTA[0]},{JAKARTA[1]}", radius_km=20)
    assert page["fallback"] == ["widened_radius"]
    assert page["radius_km"] is None
    assert [r["product"]["id"] for r in page["results"]] == [drone["id"]]
    assert page["results"][0]["distance_km"] == pytest.approx(geodesic(JAKARTA, BANDUNG).km, abs=1e-3)


async def test_fallback_drops_terms_but_keeps_filters(client):
    supplier = await add_supplier(client, lat=-6.21, lng=106.85)
    keep = await add_product(client, supplier_id=supplier["id"], name="Gitar", price=1_000_000, category="hobi")
    await add_product(client, supplier_id=supplier["id"], name="Piano", price=9_000_000, category="hobi")
    await add_product(client, supplier_id=supplier["id"], name="Kulkas", price=500_000, category="elektronik")
    page = await search(client, q="biola", category="hobi", max_price=2_000_000,
                        location=f"{JAKARTA[0]},{JAKARTA[1]}", radius_km=30)
    assert page["fallback"] == ["dropped_terms"]
    assert [r["product"]["id"] for r in page["results"]] == [keep["id"]]
    strict = await search(client, q="biola", category="hobi", fallback="false")
    assert strict["results"] == [] and strict["total"] == 0 and strict["fallback"] == []


async def test_like_wildcards_in_a_query_are_literal(client):
    supplier = await add_supplier(client, lat=-6.2, lng=106.8)
    await add_product(client, supplier_id=supplier["id"], name="Kaos Polos")
    percent = await add_product(client, supplier_id=supplier["id"], name="Diskon 100% Kaos")
    page = await search(client, q="100%", fallback="false")
    assert [r["product"]["id"] for r in page["results"]] == [percent["id"]]
    assert (await search(client, q="_a", fallback="false"))["results"] == []


async def test_inactive_suppliers_are_not_searched(client):
    closed = await add_supplier(client, lat=-6.2, lng=106.8, active=False)
    await add_product(client, supplier_id=closed["id"], name="Rahasia")
    page = await search(client, q="rahasia", location="-6.2,106.8")
    assert page["results"] == [] and page["total"] == 0


async def test_a_page_past_the_end_still_reports_the_total(client, coffee_map):
    page = await search(client, q="kopi", location="-6.2,106.8", limit=10, offset=500)
    assert page["results"] == []
    assert page["total"] == len(coffee_map)


async def test_price_sort_puts_price_first(client):
    supplier = await add_supplier(client, lat=-6.2, lng=106.8)
    prices = [300, 100, 200]
    for price in prices:
        await add_product(client, supplier_id=supplier["id"], name="Teh", price=price)
    page = await search(client, q="teh", location="-6.2,106.8", sort="price_desc")
    assert [r["product"]["price"] for r in page["results"]] == [300, 200, 100]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"location": "-6.2"}, "location"),
        ({"location": "-96.2,106.8"}, "location"),
        ({"location": "-6.2,186.8"}, "location"),
        ({"radius_km": 10}, "radius_km"),
        ({"location": "0,0", "radius_km": -1}, "radius_km"),
        ({"min_price": -1}, "min_price"),
        ({"min_price": 10, "max_price": 5}, "max_price"),
        ({"limit": 101}, "limit"),
        ({"offset": -1}, "offset"),
        ({"q": "x" * 501}, "q"),
        ({"sort": "random"}, "sort"),
        ({"q": "kopi\x00"}, "q"),
        ({"category": "\x00"}, "category"),
    ],
)
async def test_bad_search_parameters_are_422_naming_them(client, params, field):
    response = await client.get("/api/products/search", params=params, headers=READ)
    assert response.status_code == 422, response.text
    assert field in field_of(response)


async def test_ai_search_parses_the_query_and_searches_near_the_place(client):
    bandung = await add_supplier(client, lat=BANDUNG[0], lng=BANDUNG[1])
    jakarta = await add_supplier(client, lat=JAKARTA[0], lng=JAKARTA[1])
    cheap_bdg = await add_product(client, supplier_id=bandung["id"], name="Kopi Arabika", price=80_000,
                                  category="makanan")
    await add_product(client, supplier_id=bandung["id"], name="Kopi Luwak", price=450_000, category="makanan")
    await add_product(client, supplier_id=jakarta["id"], name="Kopi Arabika", price=70_000, category="makanan")
    response = await client.post("/api/products/ai-search", json={"query": "kopi di Bandung di bawah 100rb"},
                                 headers=READ)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["parsed"]["max_price"] == 100_000
    assert body["parsed"]["place"]["name"] == "Bandung"
    assert body["radius_km"] == 50
    assert [r["product"]["id"] for r in body["results"]] == [cheap_bdg["id"]]
    assert body["results"][0]["distance_km"] < 10


async def test_ai_search_uses_the_given_location_when_the_query_names_no_place(client):
    far = await add_supplier(client, lat=BANDUNG[0], lng=BANDUNG[1])
    near = await add_supplier(client, lat=JAKARTA[0], lng=JAKARTA[1])
    for supplier in (far, near):
        await add_product(client, supplier_id=supplier["id"], name="Raket Badminton", category="olahraga")
    response = await client.post(
        "/api/products/ai-search",
        json={"query": "raket badminton", "location": {"lat": JAKARTA[0], "lng": JAKARTA[1]}, "radius_km": 500},
        headers=READ,
    )
    body = response.json()
    assert [r["supplier"]["id"] for r in body["results"]] == [near["id"], far["id"]]
    assert body["parsed"]["place"] is None


@pytest.mark.parametrize(
    ("body", "field"),
    [({"query": ""}, "query"), ({"query": "x" * 501}, "query"),
     ({"query": "kopi", "location": {"lat": 100, "lng": 0}}, "lat"), ({"query": "kopi", "limit": 0}, "limit"),
     ({"query": "kopi\x00"}, "query")],
)
async def test_bad_ai_search_requests_are_422(client, body, field):
    response = await client.post("/api/products/ai-search", json=body, headers=READ)
    assert response.status_code == 422
    assert field in field_of(response)


async def test_compare_lists_each_suppliers_cheapest_offer(client):
    jakarta = await add_supplier(client, lat=JAKARTA[0], lng=JAKARTA[1])
    bandung = await add_supplier(client, lat=BANDUNG[0], lng=BANDUNG[1])
    medan = await add_supplier(client, lat=3.5952, lng=98.6722)
    jkt_cheap = await add_product(client, supplier_id=jakarta["id"], name="Kopi Gayo 250g", price=95_000)
    await add_product(client, supplier_id=jakarta["id"], name="Kopi Gayo 250g Premium", price=140_000)
    bdg = await add_product(client, supplier_id=bandung["id"], name="kopi gayo 250g", price=85_000)
    mdn = await add_product(client, supplier_id=medan["id"], name="Kopi Gayo 250g", price=60_000)
    await add_product(client, supplier_id=medan["id"], name="Kopi Gayo 250g", price=50_000, stock_quantity=0)
    await add_product(client, supplier_id=bandung["id"], name="Kopi Toraja", price=10_000)

    response = await client.get("/api/products/compare", params={"name": "kopi gayo", "location": "-6.2,106.85"},
                                headers=READ)
    assert response.status_code == 200, response.text
    body = response.json()
    assert [o["product"]["id"] for o in body["offers"]] == [mdn["id"], bdg["id"], jkt_cheap["id"]]
    assert (body["min_price"], body["max_price"]) == (60_000, 95_000)
    assert body["cheapest_product_id"] == mdn["id"]
    assert body["nearest_product_id"] == jkt_cheap["id"]
    assert all(o["delivery"] is not None for o in body["offers"])

    by_distance = (await client.get("/api/products/compare", headers=READ, params={
        "name": "kopi gayo", "location": "-6.2,106.85", "sort": "distance"})).json()
    assert [o["product"]["id"] for o in by_distance["offers"]] == [jkt_cheap["id"], bdg["id"], mdn["id"]]


async def test_compare_needs_a_usable_name_and_location_for_distance(client):
    response = await client.get("/api/products/compare", params={"name": "x"}, headers=READ)
    assert response.status_code == 422 and field_of(response) == ["name"]
    response = await client.get("/api/products/compare", params={"name": "kopi", "sort": "distance"}, headers=READ)
    assert response.status_code == 422 and field_of(response) == ["sort"]
