"""The marketplace's PostgreSQL stopped and started again under a running gateway (a real server).

What a client sees: /v1 answers throughout (fake engine: the relay is not what is tested
here); the marketplace answers 503 with a message and Retry-After while its database is
down, never a 500; once the server is back the marketplace serves again without a restart,
with every row committed before the outage. The same when the database is already down as
the gateway starts. The server is the test's own (``stoppable_postgres``), never the session's.
"""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from marketplace.feature import MarketplaceFeature
from marketplace.settings import MarketplaceSettings
from tests.marketplace.support import (
    JAKARTA,
    READ,
    WRITE,
    add_product,
    add_supplier,
    fake_engine,
    make_settings,
    running_app,
)
from tests.support.waiting import until

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

FEATURES = {"features": {"marketplace": lambda gateway: MarketplaceFeature(gateway, MarketplaceSettings(
    marketplace_db_retry_seconds=0.05, marketplace_db_retry_max_seconds=0.5))}}


@pytest.fixture
async def database_url(stoppable_postgres) -> str:
    connection = await asyncpg.connect(stoppable_postgres.server.dsn)
    try:
        await connection.execute('CREATE DATABASE "market"')
    finally:
        await connection.close()
    return stoppable_postgres.server.database_url("market")


async def relay_answers(client) -> bool:
    response = await client.post("/v1/chat/completions", headers=READ, json={
        "model": "fake-qwen", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    return response.status_code == 200


def assert_503(response) -> None:
    assert response.status_code == 503, response.text
    assert response.json()["detail"].startswith("the marketplace's database ")
    assert int(response.headers["retry-after"]) >= 1


async def catalogue_ids(client, supplier_id: int) -> list[int]:
    response = await client.get(f"/api/suppliers/{supplier_id}/products", headers=READ)
    assert response.status_code == 200, response.text
    return [product["id"] for product in response.json()["products"]]


async def test_postgres_stopped_and_started_again_under_a_running_gateway(database_url, stoppable_postgres,
                                                                         fake_engine):
    settings = make_settings(database_url=database_url, vllm_base_url=fake_engine.base_url)
    async with running_app(settings, **FEATURES) as client:
        marketplace = client.app.state.marketplace
        supplier = await add_supplier(client, lat=JAKARTA[0], lng=JAKARTA[1])
        committed = [(await add_product(client, supplier_id=supplier["id"], name=f"Kopi {i}"))["id"] for i in range(5)]

        await asyncio.to_thread(stoppable_postgres.stop_server)
        statuses = set()
        for request in (
            client.get(f"/api/suppliers/{supplier['id']}/products", headers=READ),
            client.get("/api/products/search", params={"q": "kopi"}, headers=READ),
            client.post("/api/products", headers=WRITE, json={
                "supplier_id": supplier["id"], "name": "Kopi baru", "price": 1000, "stock_quantity": 1,
                "category": "kopi"}),
        ):
            response = await request
            assert_503(response)
            statuses.add(response.status_code)
        assert statuses == {503}
        assert await relay_answers(client)
        ready = await client.get("/readyz", headers=READ)
        assert ready.status_code == 200 and ready.json()["features"]["marketplace"]["ready"] is False

        await asyncio.to_thread(stoppable_postgres.start_server)
        assert await catalogue_ids(client, supplier["id"]) == committed  # served again, nothing lost
        await until(lambda: marketplace.status()["ready"])
        added = await add_product(client, supplier_id=supplier["id"], name="Kopi sesudah")
        assert await catalogue_ids(client, supplier["id"]) == [*committed, added["id"]]


async def test_a_gateway_started_while_postgres_is_down_serves_the_marketplace_once_it_is_up(
        database_url, stoppable_postgres, fake_engine):
    settings = make_settings(database_url=database_url, vllm_base_url=fake_engine.base_url)
    async with running_app(settings, **FEATURES) as client:  # a first start: migrations, a supplier
        supplier = await add_supplier(client, lat=JAKARTA[0], lng=JAKARTA[1])
        committed = [(await add_product(client, supplier_id=supplier["id"], name="Kopi"))["id"]]

    await asyncio.to_thread(stoppable_postgres.stop_server)
    async with running_app(settings, **FEATURES) as client:  # the start completes without the database
        marketplace = client.app.state.marketplace
        assert await relay_answers(client)
        assert_503(await client.get(f"/api/suppliers/{supplier['id']}", headers=READ))
        assert marketplace.status()["ready"] is False
        assert (await client.get("/readyz", headers=READ)).status_code == 200

        await asyncio.to_thread(stoppable_postgres.start_server)
        await until(lambda: marketplace.status()["ready"])
        assert await catalogue_ids(client, supplier["id"]) == committed
        assert await relay_answers(client)
