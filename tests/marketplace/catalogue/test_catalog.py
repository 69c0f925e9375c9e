"""Suppliers and products through the HTTP API: create, read, update, list, and every bad input."""

from __future__ import annotations

import pytest

from tests.marketplace.support import (
    READ,
    WRITE,
    add_product,
    add_supplier,
    client,
    count_rows,
    database_url,
    fake_engine,
    field_of,
    settings,
)


async def test_registered_supplier_reads_back(client):
    created = await add_supplier(client, lat=-7.2575, lng=112.7521, name="Toko Surabaya")
    response = await client.get(f"/api/suppliers/{created['id']}", headers=READ)
    assert response.status_code == 200
    body = response.json()
    assert body == created
    assert body["location"] == {"lat": -7.2575, "lng": 112.7521}
    assert body["active"] is True
    assert body["registration_date"].endswith("Z") or "+00:00" in body["registration_date"]


async def test_supplier_location_may_be_given_as_text(client):
    response = await client.post(
        "/api/suppliers/register",
        json={"name": "A", "business_name": "B", "location": "-6.9175,107.6191"},
        headers=WRITE,
    )
    assert response.status_code == 201, response.text
    assert response.json()["location"] == {"lat": -6.9175, "lng": 107.6191}


@pytest.mark.parametrize(
    ("location", "field"),
    [
        ({"lat": 91, "lng": 106.8}, "lat"),
        ({"lat": -90.5, "lng": 106.8}, "lat"),
        ({"lat": -6.2, "lng": 180.01}, "lng"),
        ({"lat": -6.2, "lng": -181}, "lng"),
        ({"lat": "north", "lng": 106.8}, "lat"),
        ("-6.2;106.8", "location"),
        ("95,106.8", "location"),
    ],
)
async def test_supplier_with_bad_coordinates_is_refused_naming_the_field(client, location, field):
    response = await client.post(
        "/api/suppliers/register",
        json={"name": "A", "business_name": "B", "location": location},
        headers=WRITE,
    )
    assert response.status_code == 422, response.text
    assert field in field_of(response)
    assert await count_rows(client, "suppliers") == 0


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"name": "x" * 201}, "name"),
        ({"name": ""}, "name"),
        ({"address": "a" * 501}, "address"),
        ({"contact": "c" * 201}, "contact"),
        ({"website": "http://example.com"}, "website"),  # unknown fields are refused, not ignored
    ],
)
async def test_supplier_with_bad_fields_is_refused(client, overrides, field):
    body = {"name": "A", "business_name": "B", "location": {"lat": 0, "lng": 0}, **overrides}
    response = await client.post("/api/suppliers/register", json=body, headers=WRITE)
    assert response.status_code == 422
    assert field in field_of(response)
    assert await count_rows(client, "suppliers") == 0


async def test_unknown_supplier_is_404(client):
    response = await client.get("/api/suppliers/999", headers=READ)
    assert response.status_code == 404
    assert "supplier 999" in response.json()["detail"]
    response = await client.get("/api/suppliers/999/products", headers=READ)
    assert response.status_code == 404


@pytest.mark.parametrize("bad_id", ["0", "-3", "abc", str(2**31)])
async def test_ids_out_of_range_are_422(client, bad_id):
    response = await client.get(f"/api/suppliers/{bad_id}", headers=READ)
    assert response.status_code == 422
    assert field_of(response) == ["supplier_id"]


async def test_product_created_updated_and_listed(client):
    supplier = await add_supplier(client, lat=-6.2, lng=106.8)
    product = await add_product(
        client, supplier_id=supplier["id"], name="Laptop Gaming", price=15_000_000, stock_quantity=3,
        tags=["Gaming", "laptop", "gaming"], description="RTX 4060",
    )
    assert product["tags"] == ["gaming", "laptop"]  # lower-cased, de-duplicated
    assert product["in_stock"] is True

    response = await client.put(f"/api/products/{product['id']}", json={"stock_quantity": 0, "price": 14_500_000},
                                headers=WRITE)
    assert response.status_code == 200, response.text
    updated = response.json()
    assert (updated["stock_quantity"], updated["price"], updated["in_stock"]) == (0, 14_500_000, False)
    assert updated["name"] == "Laptop Gaming" and updated["description"] == "RTX 4060"
    assert updated["updated_at"] >= product["updated_at"]

    response = await client.get(f"/api/products/{product['id']}", headers=READ)
    assert response.json()["price"] == 14_500_000

    listing = (await client.get(f"/api/suppliers/{supplier['id']}/products", headers=READ)).json()
    assert listing["total"] == 1
    assert [p["id"] for p in listing["products"]] == [product["id"]]


async def test_supplier_products_are_paginated_by_id(client):
    supplier = await add_supplier(client, lat=-6.2, lng=106.8)
    ids = [(await add_product(client, supplier_id=supplier["id"], name=f"Barang {i}"))["id"] for i in range(5)]
    page = (await client.get(f"/api/suppliers/{supplier['id']}/products", params={"limit": 2, "offset": 2},
                             headers=READ)).json()
    assert page["total"] == 5
    assert [p["id"] for p in page["products"]] == ids[2:4]


async def test_updating_tags_changes_what_search_matches(client):
    supplier = await add_supplier(client, lat=-6.2, lng=106.8)
    product = await add_product(client, supplier_id=supplier["id"], name="Barang", tags=["lama"])
    await client.put(f"/api/products/{product['id']}", json={"tags": ["baru"]}, headers=WRITE)
    found = (await client.get("/api/products/search", params={"q": "baru", "fallback": "false"}, headers=READ)).json()
    assert [r["product"]["id"] for r in found["results"]] == [product["id"]]
    gone = (await client.get("/api/products/search", params={"q": "lama", "fallback": "false"}, headers=READ)).json()
    assert gone["results"] == []


async def test_product_for_unknown_supplier_is_404_and_not_written(client):
    response = await client.post(
        "/api/products",
        json={"supplier_id": 4242, "name": "X", "price": 1, "category": "hobi"},
        headers=WRITE,
    )
    assert response.status_code == 404
    assert response.json()["detail"].startswith("supplier_id:")
    assert await count_rows(client, "products") == 0


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"price": -1}, "price"),
        ({"price": 10**13}, "price"),
        ({"price": 1500.5}, "price"),
        ({"price": "1000"}, "price"),
        ({"stock_quantity": -5}, "stock_quantity"),
        ({"name": "n" * 201}, "name"),
        ({"description": "d" * 5001}, "description"),
        ({"category": "weapons"}, "category"),
        ({"tags": ["t" * 41]}, 0),
        ({"tags": [f"t{i}" for i in range(21)]}, "tags"),
        ({"tags": ["a|b"]}, "tags"),
        ({"supplier_id": 0}, "supplier_id"),
        ({"colour": "red"}, "colour"),
        ({"description": "nul\x00byte"}, "description"),  # PostgreSQL cannot store it: refused for all
        ({"tags": ["ok", "n\x00l"]}, "tags"),
    ],
)
async def test_product_with_bad_fields_is_refused(client, overrides, field):
    supplier = await add_supplier(client, lat=-6.2, lng=106.8)
    body = {"supplier_id": supplier["id"], "name": "X", "price": 1000, "category": "hobi", **overrides}
    response = await client.post("/api/products", json=body, headers=WRITE)
    assert response.status_code == 422, response.text
    assert str(field) in field_of(response)
    assert await count_rows(client, "products") == 0


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"price": -10}, "price"),
        ({"stock_quantity": -1}, "stock_quantity"),
        ({"supplier_id": 2}, "supplier_id"),
        ({"price": None}, "price"),
        ({"price": 6000, "tags": None}, "tags"),
        ({"name": None}, "name"),
    ],
)
async def test_bad_updates_change_nothing(client, changes, field):
    supplier = await add_supplier(client, lat=-6.2, lng=106.8)
    product = await add_product(client, supplier_id=supplier["id"], name="X", price=5000, stock_quantity=2)
    response = await client.put(f"/api/products/{product['id']}", json=changes, headers=WRITE)
    assert response.status_code == 422, response.text
    assert field_of(response) == [field]  # the error's loc names the field, as for any other bad value
    after = (await client.get(f"/api/products/{product['id']}", headers=READ)).json()
    assert after == product


async def test_empty_update_is_refused(client):
    supplier = await add_supplier(client, lat=-6.2, lng=106.8)
    product = await add_product(client, supplier_id=supplier["id"], name="X")
    response = await client.put(f"/api/products/{product['id']}", json={}, headers=WRITE)
    assert response.status_code == 422


async def test_update_of_unknown_product_is_404(client):
    response = await client.put("/api/products/77", json={"price": 1}, headers=WRITE)
    assert response.status_code == 404
    assert "product 77" in response.json()["detail"]
    assert (await client.get("/api/products/77", headers=READ)).status_code == 404
