"""Who may call what: every marketplace route behind the gateway's API keys, by role.

The catalogue: any key reads, an admin key writes. Users' data (users, chat, conversations,
tokens): an app or admin key (its own users: tests/marketplace/users/test_user_access.py), never a
read key.
"""

from __future__ import annotations

import uuid

import pytest

from marketplace.feature import marketplace_router
from tests.marketplace.support import (
    APP,
    READ,
    WRITE,
    add_product,
    add_supplier,
    add_user,
    client,
    count_rows,
    database_url,
    fake_engine,
    settings,
)

WRITES = [
    ("POST", "/api/suppliers/register", {"name": "A", "business_name": "B", "location": {"lat": 0, "lng": 0}}),
    ("POST", "/api/products", {"supplier_id": 1, "name": "X", "price": 1, "category": "hobi"}),
    ("PUT", "/api/products/1", {"price": 2}),
]
READS = [
    ("GET", "/api/suppliers/1", None),
    ("GET", "/api/suppliers/1/products", None),
    ("GET", "/api/products/1", None),
    ("GET", "/api/products/search?q=barang", None),
    ("GET", "/api/products/compare?name=barang", None),
    ("POST", "/api/products/ai-search", {"query": "laptop"}),
]
# Users' data: {user} and {conversation} are the catalogue fixture's (owned by APP).
USERS_DATA = [
    ("POST", "/api/users", {"name": "U", "email": "u@example.com"}),
    ("GET", "/api/users/{user}", None),
    ("PATCH", "/api/users/{user}", {"name": "Baru"}),
    ("POST", "/api/users/{user}/tokens", {}),
    ("DELETE", "/api/users/{user}/tokens", None),
    ("POST", "/api/chat", {"user_id": "{user}", "message": "halo"}),
    ("GET", "/api/conversations/{conversation}", None),
    ("DELETE", "/api/users/{user}", None),
]


@pytest.fixture
async def catalogue(client):
    supplier = await add_supplier(client, lat=-6.2, lng=106.8)
    await add_product(client, supplier_id=supplier["id"], name="Barang")
    user = await add_user(client, email="pembaca@example.com")
    chat = await client.post("/api/chat", json={"user_id": user["id"], "message": "ada barang?"}, headers=APP)
    assert chat.status_code == 200, chat.text
    return {"user": user["id"], "conversation": chat.json()["conversation_id"]}


def filled(path: str, body, ids: dict):
    path = path.format(**ids)
    if isinstance(body, dict):
        body = {key: value.format(**ids) if isinstance(value, str) else value for key, value in body.items()}
    return path, body


@pytest.mark.parametrize(("method", "path", "body"), WRITES + READS + USERS_DATA)
async def test_every_route_needs_an_api_key(client, method, path, body):
    path, body = filled(path, body, {"user": uuid.uuid4(), "conversation": uuid.uuid4()})
    response = await client.request(method, path, json=body)
    assert response.status_code == 401


@pytest.mark.parametrize(("method", "path", "body"), WRITES)
@pytest.mark.parametrize("headers", [READ, APP], ids=["read", "app"])
async def test_only_an_admin_key_writes_the_catalogue(client, catalogue, method, path, body, headers):
    before = {t: await count_rows(client, t) for t in ("suppliers", "products")}
    price_before = (await client.get("/api/products/1", headers=READ)).json()["price"]
    response = await client.request(method, path, json=body, headers=headers)
    assert response.status_code == 403
    assert "write" in response.json()["detail"]
    assert {t: await count_rows(client, t) for t in before} == before
    assert (await client.get("/api/products/1", headers=READ)).json()["price"] == price_before


@pytest.mark.parametrize(("method", "path", "body"), WRITES)
async def test_a_write_key_can_write(client, catalogue, method, path, body):
    response = await client.request(method, path, json=body, headers=WRITE)
    assert response.status_code in (200, 201), response.text


@pytest.mark.parametrize(("method", "path", "body"), READS)
@pytest.mark.parametrize("headers", [READ, APP], ids=["read", "app"])
async def test_every_key_reads_the_catalogue(client, catalogue, method, path, body, headers):
    response = await client.request(method, path, json=body, headers=headers)
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(("method", "path", "body"), USERS_DATA)
async def test_a_read_key_reaches_no_users_data(client, catalogue, fake_engine, method, path, body):
    """A plain inference key: 403 by its role, before anything is looked up; nothing changes."""
    asked = len(fake_engine.received)
    before = {t: await count_rows(client, t) for t in ("users", "conversations", "messages", "user_tokens")}
    path, body = filled(path, body, catalogue)
    response = await client.request(method, path, json=body, headers=READ)
    assert response.status_code == 403, response.text
    assert "APP_API_KEYS" in response.json()["detail"]
    assert {t: await count_rows(client, t) for t in before} == before
    assert len(fake_engine.received) == asked


@pytest.mark.parametrize(("method", "path", "body"), USERS_DATA)
async def test_the_owning_app_key_reaches_its_users_data(client, catalogue, method, path, body):
    path, body = filled(path, body, catalogue)
    response = await client.request(method, path, json=body, headers=APP)
    assert response.status_code in (200, 201, 204), response.text


async def test_conversation_reads_back_and_is_404_when_unknown(client, catalogue):
    response = await client.get(f"/api/conversations/{catalogue['conversation']}", headers=APP)
    assert response.status_code == 200
    assert response.json()["user_id"] == catalogue["user"]
    assert [m["role"] for m in response.json()["messages"]] == ["user", "assistant"]
    assert (await client.get(f"/api/conversations/{uuid.uuid4()}", headers=APP)).status_code == 404


# Integers beyond 64 bits, wherever each route takes a number: a 422 naming the field, never a
# 500 (the error body echoes the input, which orjson cannot render; seen with "limit": 10**20).
HUGE = 10**20
BIG_INTEGERS = {
    ("POST", "/api/suppliers/register"): [
        ("json", {"name": "A", "business_name": "B", "location": {"lat": HUGE, "lng": 0}}, "lat")],
    ("GET", "/api/suppliers/{supplier_id}"): [("path", f"/api/suppliers/{HUGE}", "supplier_id")],
    ("GET", "/api/suppliers/{supplier_id}/products"): [
        ("path", f"/api/suppliers/{HUGE}/products", "supplier_id"),
        ("path", f"/api/suppliers/1/products?limit={HUGE}", "limit"),
        ("path", f"/api/suppliers/1/products?offset={HUGE}", "offset")],
    ("POST", "/api/products"): [
        ("json", {"supplier_id": HUGE, "name": "X", "price": 1, "category": "hobi"}, "supplier_id"),
        ("json", {"supplier_id": 1, "name": "X", "price": HUGE, "category": "hobi"}, "price"),
        ("json", {"supplier_id": 1, "name": "X", "price": 1, "stock_quantity": -HUGE, "category": "hobi"},
         "stock_quantity")],
    ("GET", "/api/products/search"): [
        ("path", f"/api/products/search?min_price={HUGE}", "min_price"),
        ("path", f"/api/products/search?offset={HUGE}", "offset"),
        ("path", f"/api/products/search?limit={HUGE}", "limit"),
        ("path", f"/api/products/search?radius_km={HUGE}&location=0,0", "radius_km")],
    ("POST", "/api/products/ai-search"): [
        ("json", {"query": "kopi", "offset": HUGE}, "offset"),
        ("json", {"query": "kopi", "limit": HUGE}, "limit"),
        ("json", {"query": "kopi", "radius_km": HUGE}, "radius_km"),
        ("json", {"query": "kopi", "location": {"lat": 0, "lng": -HUGE}}, "lng")],
    ("GET", "/api/products/compare"): [("path", f"/api/products/compare?name=kopi&limit={HUGE}", "limit")],
    ("GET", "/api/products/{product_id}"): [("path", f"/api/products/{HUGE}", "product_id")],
    ("PUT", "/api/products/{product_id}"): [
        ("path", f"/api/products/{HUGE}", "product_id"),
        ("json", {"price": HUGE}, "price"),
        ("json", {"stock_quantity": HUGE}, "stock_quantity")],
    ("POST", "/api/users"): [
        ("json", {"name": "U", "email": "u@example.com", "location": {"lat": HUGE, "lng": 0}}, "lat")],
    ("GET", "/api/users/{user_id}"): [("path", f"/api/users/{HUGE}", "user_id")],
    ("PATCH", "/api/users/{user_id}"): [("path", f"/api/users/{HUGE}", "user_id"),
                                        ("json", {"location": {"lat": 0, "lng": HUGE}}, "lng")],
    ("POST", "/api/users/{user_id}/tokens"): [("path", f"/api/users/{HUGE}/tokens", "user_id"),
                                              ("json", {"ttl_seconds": HUGE}, "ttl_seconds")],
    ("DELETE", "/api/users/{user_id}"): [("path", f"/api/users/{HUGE}", "user_id")],
    ("DELETE", "/api/users/{user_id}/tokens"): [("path", f"/api/users/{HUGE}/tokens", "user_id")],
    ("DELETE", "/api/users/{user_id}/tokens/{token_id}"): [
        ("path", f"/api/users/{HUGE}/tokens/{uuid.UUID(int=1)}", "user_id"),
        ("path", f"/api/users/{uuid.UUID(int=1)}/tokens/{HUGE}", "token_id")],
    ("POST", "/api/chat"): [("json", {"user_id": HUGE, "message": "halo"}, "user_id")],
    ("GET", "/api/conversations/{conversation_id}"): [("path", f"/api/conversations/{HUGE}", "conversation_id")],
    ("GET", "/api/conversations/{conversation_id}/events"): [
        ("path", f"/api/conversations/{HUGE}/events", "conversation_id")],
    ("GET", "/api/categories"): [],  # takes no number
    ("GET", "/api/places"): [("path", f"/api/places?q=ja&limit={HUGE}", "limit")],
}


def test_the_big_integer_table_covers_every_marketplace_route():
    declared = {(method, route.path) for route in marketplace_router().routes for method in route.methods}
    assert declared == set(BIG_INTEGERS)


@pytest.mark.parametrize(
    ("method", "template", "kind", "value", "field"),
    [(method, template, kind, value, field) for (method, template), cases in BIG_INTEGERS.items()
     for kind, value, field in cases],
)
async def test_integers_beyond_64_bits_are_a_clean_422(client, catalogue, method, template, kind, value, field):
    if kind == "path":
        response = await client.request(method, value, headers=WRITE)
    else:
        path = template.replace("{product_id}", "1").replace("{user_id}", catalogue["user"])
        response = await client.request(method, path, json=value, headers=WRITE)
    assert response.status_code == 422, response.text
    assert field in [str(error["loc"][-1]) for error in response.json()["detail"]]


async def test_a_huge_integer_inside_preferences_is_stored_and_read_back(client):
    body = {"name": "U", "email": "big@example.com", "preferences": {"budget": HUGE}}
    response = await client.post("/api/users", json=body, headers=WRITE)
    assert response.status_code == 201, response.text
    user = (await client.get(f"/api/users/{response.json()['id']}", headers=WRITE)).json()
    assert user["preferences"] == {"budget": HUGE}
