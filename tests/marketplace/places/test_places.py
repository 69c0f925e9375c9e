"""GET /api/places: the gazetteer behind a place picker, on the real app (SQLite, fake engine)."""

from __future__ import annotations

import pytest
from geopy.distance import geodesic

from tests.marketplace.support import (
    READ,
    client,
    database_url,
    fake_engine,
    field_of,
    settings,
)

# City centres from public references, independent of the gazetteer's data.
SURABAYA = (-7.2575, 112.7521)

# The app needs a database to start, but /api/places never reads it (the gazetteer is a file).
pytestmark = pytest.mark.sqlite_only("/api/places reads the offline gazetteer, never the database")


async def test_places_answers_the_best_match_first_with_its_coordinates(client):
    response = await client.get("/api/places", params={"q": "sura", "limit": 5}, headers=READ)
    assert response.status_code == 200
    places = response.json()["places"]
    assert 1 <= len(places) <= 5
    first = places[0]
    assert set(first) == {"name", "admin1", "lat", "lng", "population"}
    assert first["name"] == "Surabaya" and first["admin1"] == "Jawa Timur"
    assert geodesic(SURABAYA, (first["lat"], first["lng"])).km < 20
    assert first["population"] > 1_000_000


async def test_places_finds_aliases_and_later_words(client):
    jogja = (await client.get("/api/places", params={"q": "jogja"}, headers=READ)).json()["places"]
    timur = (await client.get("/api/places", params={"q": "timur", "limit": 50}, headers=READ)).json()["places"]
    assert jogja[0]["name"] == "Yogyakarta"
    assert "Jakarta Timur" in [p["name"] for p in timur]


async def test_places_respects_the_limit_and_defaults_to_ten(client):
    few = (await client.get("/api/places", params={"q": "ba", "limit": 3}, headers=READ)).json()["places"]
    default = (await client.get("/api/places", params={"q": "ba"}, headers=READ)).json()["places"]
    assert len(few) == 3 and len(default) == 10
    assert [p["name"] for p in few] == [p["name"] for p in default[:3]]


@pytest.mark.parametrize("q", ["qqqzzz", "!!!"])
async def test_places_with_no_match_is_an_empty_list(client, q):
    response = await client.get("/api/places", params={"q": q}, headers=READ)
    assert response.status_code == 200 and response.json() == {"places": []}


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({}, "q"),
        ({"q": "   "}, "q"),
        ({"q": "x" * 101}, "q"),
        ({"q": "sura\x00"}, "q"),
        ({"q": "sura", "limit": 0}, "limit"),
        ({"q": "sura", "limit": 51}, "limit"),
        ({"q": "sura", "limit": "ten"}, "limit"),
    ],
)
async def test_places_refuses_bad_input_naming_the_field(client, params, field):
    response = await client.get("/api/places", params=params, headers=READ)
    assert response.status_code == 422
    assert field_of(response) == [field]


async def test_places_needs_an_api_key(client):
    response = await client.get("/api/places", params={"q": "sura"})
    assert response.status_code == 401
