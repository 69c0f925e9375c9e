"""Rules that several routes share, each with one home: where a search is centred, and the price cap.

``listing.search_origin``: a place named in the question wins over the request's location,
which wins over the user's saved one, in /api/chat and in ai-search alike.
``models.PRICE_MAX``: the highest price a product may have, a search may ask for, the query
parser reads and the engine's filters may hold.
"""

from __future__ import annotations

import pytest

from marketplace.catalogue.models import PRICE_MAX
from marketplace.places.geo import Point
from marketplace.search import extraction
from marketplace.search.listing import search_origin
from marketplace.search.query import parse_price, parse_query
from tests.marketplace.support import (
    APP,
    READ,
    WRITE,
    add_product,
    add_supplier,
    add_user,
    ai_client,
    client,
    database_url,
    fake_engine,
    field_of,
    scripted_engine,
    settings,
)

BANDUNG = (-6.9175, 107.6191)
SURABAYA = (-7.2575, 112.7521)
HERE, THERE, HOME = Point(1, 1), Point(2, 2), Point(3, 3)


# --- where a natural-language search is centred ---------------------------------------------------


@pytest.mark.parametrize(("named_place", "request_location", "user_location", "expected"), [
    (HERE, THERE, HOME, (HERE, "place")),
    (HERE, None, HOME, (HERE, "place")),
    (None, THERE, HOME, (THERE, "request")),
    (None, None, HOME, (HOME, "user")),
    (None, None, None, (None, None)),
])
def test_a_named_place_wins_then_the_request_then_the_user(named_place, request_location, user_location, expected):
    assert search_origin(named_place=named_place, request_location=request_location,
                         user_location=user_location) == expected


@pytest.fixture
async def two_cities(ai_client):
    """The same laptop in Bandung and in Surabaya (660 km apart)."""
    ids = {}
    for city, (lat, lng) in (("bandung", BANDUNG), ("surabaya", SURABAYA)):
        supplier = await add_supplier(ai_client, lat=lat, lng=lng, name=f"Toko {city}")
        ids[city] = (await add_product(ai_client, supplier_id=supplier["id"], name="Laptop Kantor",
                                       category="laptop"))["id"]
    return ids


async def test_ai_search_centres_on_a_place_in_the_query_over_the_request_location(ai_client, scripted_engine,
                                                                                 two_cities):
    surabaya = {"lat": SURABAYA[0], "lng": SURABAYA[1]}
    named = await ai_client.post("/api/products/ai-search", headers=READ,
                                 json={"query": "laptop di Bandung", "location": surabaya})
    assert named.status_code == 200, named.text
    assert [hit["product"]["id"] for hit in named.json()["results"]] == [two_cities["bandung"]]
    assert named.json()["sources"]["location"] == "rules"
    unnamed = await ai_client.post("/api/products/ai-search", headers=READ,
                                   json={"query": "laptop", "location": surabaya})
    assert [hit["product"]["id"] for hit in unnamed.json()["results"]] == [two_cities["surabaya"]]
    assert unnamed.json()["sources"]["location"] == "request"


async def test_chat_centres_on_a_place_in_the_message_over_the_request_location(ai_client, scripted_engine,
                                                                              two_cities):
    user = await add_user(ai_client, location={"lat": SURABAYA[0], "lng": SURABAYA[1]})
    response = await ai_client.post("/api/chat", headers=APP, json={
        "user_id": user["id"], "message": "laptop di Bandung", "location": {"lat": SURABAYA[0], "lng": SURABAYA[1]}})
    assert response.status_code == 200, response.text
    assert [hit["product"]["id"] for hit in response.json()["products"]] == [two_cities["bandung"]]
    stored = (await ai_client.get(f"/api/conversations/{response.json()['conversation_id']}", headers=APP)).json()
    assert stored["messages"][0]["details"]["location_source"] == "message"


# --- one price cap ---------------------------------------------------------------------------------


def test_the_cap_is_one_trillion_rupiah():
    assert PRICE_MAX == 10**12


def test_the_parser_reads_prices_up_to_the_cap_and_no_further():
    assert parse_price("Rp 1.000.000.000.000") == PRICE_MAX
    assert parse_price("1000 miliar") == PRICE_MAX
    assert parse_price("Rp 1.000.000.000.001") is None
    assert parse_price("1001 miliar") is None


def test_a_query_above_the_cap_asks_for_no_price():
    from marketplace.places.gazetteer import Gazetteer

    parsed = parse_query("laptop di bawah 1001 miliar", gazetteer=Gazetteer.load())
    assert parsed.max_price is None and parsed.min_price is None
    assert parse_query("laptop budget 1000 miliar", gazetteer=Gazetteer.load()).max_price == PRICE_MAX


def test_the_engines_filters_are_bounded_by_the_same_cap():
    properties = extraction.SCHEMA["properties"]
    for name in ("min_price", "max_price"):
        [bounded] = [option for option in properties[name]["anyOf"] if option.get("type") == "integer"]
        assert bounded["maximum"] == PRICE_MAX
    with pytest.raises(ValueError):
        extraction.EngineFilters(terms=[], category=None, min_price=None, max_price=PRICE_MAX + 1, place=None,
                                 radius_km=None, sort=None, in_stock=None)


async def test_a_product_may_cost_up_to_the_cap(client):
    supplier = await add_supplier(client, lat=BANDUNG[0], lng=BANDUNG[1])
    assert (await add_product(client, supplier_id=supplier["id"], name="Pulau", price=PRICE_MAX))["price"] == PRICE_MAX
    above = await client.post("/api/products", headers=WRITE, json={
        "supplier_id": supplier["id"], "name": "Pulau Besar", "price": PRICE_MAX + 1, "stock_quantity": 1,
        "category": "elektronik"})
    assert above.status_code == 422 and field_of(above) == ["price"]


async def test_a_search_may_ask_for_prices_up_to_the_cap(client):
    at_cap = await client.get("/api/products/search", headers=READ, params={"q": "x", "max_price": PRICE_MAX})
    assert at_cap.status_code == 200, at_cap.text
    for name in ("min_price", "max_price"):
        above = await client.get("/api/products/search", headers=READ, params={"q": "x", name: PRICE_MAX + 1})
        assert above.status_code == 422 and field_of(above) == [name]
