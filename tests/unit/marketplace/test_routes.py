"""Who may call what: every marketplace route behind the gateway's API keys; writes need write rights."""

from __future__ import annotations

import pytest

from tests.unit.marketplace.support import (
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
    ("POST", "/api/users", {"name": "U", "email": "u@example.com"}),
]
READS = [
    ("GET", "/api/suppliers/1", None),
    ("GET", "/api/suppliers/1/products", None),
    ("GET", "/api/products/1", None),
    ("GET", "/api/products/search?q=barang", None),
    ("GET", "/api/products/compare?name=barang", None),
    ("POST", "/api/products/ai-search", {"query": "laptop"}),
    ("GET", "/api/users/1", None),
    ("POST", "/api/chat", {"user_id": 1, "message": "halo"}),
    ("GET", "/api/conversations/1", None),
]


@pytest.fixture
async def catalogue(client):
    supplier = await add_supplier(client, lat=-6.2, lng=106.8)
    await add_product(client, supplier_id=supplier["id"], name="Barang")
    await add_user(client, email="pembaca@example.com")


@pytest.mark.parametrize(("method", "path", "body"), WRITES + READS)
async def test_every_route_needs_an_api_key(client, method, path, body):
    response = await client.request(method, path, json=body)
    assert response.status_code == 401


@pytest.mark.parametrize(("method", "path", "body"), WRITES)
async def test_a_read_key_cannot_write(client, catalogue, method, path, body):
    before = {t: await count_rows(client, t) for t in ("suppliers", "products", "users")}
    price_before = (await client.get("/api/products/1", headers=READ)).json()["price"]
    response = await client.request(method, path, json=body, headers=READ)
    assert response.status_code == 403
    assert "write" in response.json()["detail"]
    assert {t: await count_rows(client, t) for t in before} == before
    assert (await client.get("/api/products/1", headers=READ)).json()["price"] == price_before


@pytest.mark.parametrize(("method", "path", "body"), WRITES)
async def test_a_write_key_can_write(client, catalogue, method, path, body):
    response = await client.request(method, path, json=body, headers=WRITE)
    assert response.status_code in (200, 201), response.text


@pytest.mark.parametrize(("method", "path", "body"), [r for r in READS if "chat" not in r[1] and "conversations" not in r[1]])
async def test_a_read_key_can_read(client, catalogue, method, path, body):
    response = await client.request(method, path, json=body, headers=READ)
    assert response.status_code == 200, response.text


async def test_conversation_is_readable_with_a_read_key_and_404_when_unknown(client, catalogue):
    chat = await client.post("/api/chat", json={"user_id": 1, "message": "ada barang?"}, headers=READ)
    assert chat.status_code == 200, chat.text
    conversation_id = chat.json()["conversation_id"]
    response = await client.get(f"/api/conversations/{conversation_id}", headers=READ)
    assert response.status_code == 200
    assert [m["role"] for m in response.json()["messages"]] == ["user", "assistant"]
    assert (await client.get("/api/conversations/999", headers=READ)).status_code == 404
