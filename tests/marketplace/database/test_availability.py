"""A marketplace database that cannot serve costs the marketplace only, and it comes back by itself.

On the real app (fake engine): a database that is unreachable at start-up (a PostgreSQL URL
nobody listens on, a SQLite file whose directory cannot exist) lets the gateway start and
serve /v1; the marketplace's database routes answer 503 with a message and Retry-After (never
a 500), readiness reports the feature not ready while /readyz stays 200, and once the database
can be reached the feature comes up without a restart. The same for a database lost while
serving. The real PostgreSQL stopped and started again: test_database_outage.py.
"""

from __future__ import annotations

import sqlite3
import uuid

import pytest
from sqlalchemy import exc as sa_exc
from sqlalchemy import text

from marketplace.database.availability import is_outage, outage_kind
from marketplace.database.engines import create_engine, create_sessionmaker
from marketplace.feature import MarketplaceFeature
from marketplace.settings import MarketplaceSettings
from tests.marketplace.support import APP, JAKARTA, READ, WRITE, add_supplier, fake_engine, make_settings, running_app
from tests.support.servers import free_port
from tests.support.waiting import until

pytestmark = pytest.mark.sqlite_only("the outage is made of a URL or a path; PostgreSQL's: test_database_outage.py")

# Retries come fast here so that recovery is quick; nothing waits on their timing.
FAST_RETRIES = dict(marketplace_db_retry_seconds=0.02, marketplace_db_retry_max_seconds=0.1)


def nobody_listens() -> str:
    return f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/market"


def with_marketplace(**values) -> dict:
    return {"features": {"marketplace": lambda gateway: MarketplaceFeature(gateway, MarketplaceSettings(**values))}}


def assert_unavailable(response, *, starting: bool) -> None:
    assert response.status_code == 503, response.text
    detail = response.json()["detail"]
    assert detail.startswith("the marketplace's database " + ("is not up yet" if starting else "is unavailable"))
    assert "try again in" in detail
    assert int(response.headers["retry-after"]) >= 1


async def test_a_database_down_at_start_up_leaves_the_gateway_serving(fake_engine):
    settings = make_settings(database_url=nobody_listens(), vllm_base_url=fake_engine.base_url)
    async with running_app(settings, **with_marketplace(marketplace_db_retry_seconds=60)) as client:
        chat = await client.post("/v1/chat/completions", headers=READ, json={
            "model": "fake-qwen", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
        assert chat.status_code == 200, chat.text

        search = await client.get("/api/products/search", params={"q": "kopi"}, headers=READ)
        assert_unavailable(search, starting=True)
        assert "(connection refused)" in search.json()["detail"]
        assert_unavailable(await client.post("/api/suppliers/register", headers=WRITE, json={
            "name": "Toko", "business_name": "CV Toko", "location": "-6.2,106.8", "address": "", "contact": ""}),
            starting=True)
        assert_unavailable(await client.post("/api/chat", headers=APP, json={"user_id": str(uuid.uuid4()),
                                                                             "message": "kopi"}), starting=True)
        # What needs no database still answers.
        assert (await client.get("/api/categories", headers=READ)).status_code == 200
        assert (await client.get("/api/places", params={"q": "band"}, headers=READ)).status_code == 200

        ready = await client.get("/readyz", headers=READ)
        assert ready.status_code == 200  # the core serves; the feature says it does not
        marketplace = ready.json()["features"]["marketplace"]
        assert marketplace["ready"] is False and marketplace["database"] == "down"
        assert marketplace["problem"] == "connection refused" and marketplace["failed_attempts"] == 1
        assert (await client.get("/health", headers=READ)).json()["features"]["marketplace"]["ready"] is False


async def test_the_marketplace_comes_up_by_itself_once_its_database_can_be_opened(tmp_path, fake_engine):
    blocker = tmp_path / "data"
    blocker.write_text("a file where the database's directory should be")
    settings = make_settings(database_url=f"sqlite+aiosqlite:///{blocker}/market.db",
                             vllm_base_url=fake_engine.base_url)
    async with running_app(settings, **with_marketplace(**FAST_RETRIES)) as client:
        marketplace = client.app.state.marketplace
        status = marketplace.status()
        assert status["ready"] is False and status["problem"] == "file exists"
        assert_unavailable(await client.get("/api/products/search", headers=READ), starting=True)
        await until(lambda: marketplace.status()["failed_attempts"] >= 3)  # it keeps trying

        blocker.unlink()  # the operator fixes the path: the next attempt creates it and migrates
        await until(lambda: marketplace.status()["ready"])
        assert marketplace.status() == {"ready": True, "database": "up"}
        supplier = await add_supplier(client, lat=JAKARTA[0], lng=JAKARTA[1])
        found = await client.get(f"/api/suppliers/{supplier['id']}", headers=READ)
        assert found.status_code == 200 and found.json()["name"] == supplier["name"]
        assert (await client.get("/readyz", headers=READ)).json()["features"]["marketplace"]["ready"] is True


async def test_a_database_lost_while_serving_is_a_503_until_it_answers_again(tmp_path, fake_engine):
    settings = make_settings(database_url=f"sqlite+aiosqlite:///{tmp_path}/market.db",
                             vllm_base_url=fake_engine.base_url)
    async with running_app(settings, **with_marketplace(**FAST_RETRIES)) as client:
        marketplace = client.app.state.marketplace
        supplier = await add_supplier(client, lat=JAKARTA[0], lng=JAKARTA[1])
        # The database "goes away": the feature's connections now lead where nobody listens.
        working = marketplace.engine, marketplace.db_factory
        lost = create_engine(nobody_listens())
        marketplace.engine, marketplace.db_factory = lost, create_sessionmaker(lost)
        try:
            response = await client.get(f"/api/suppliers/{supplier['id']}", headers=READ)
            assert_unavailable(response, starting=False)
            assert "(connection refused)" in response.json()["detail"]
            assert marketplace.status()["ready"] is False
            await until(lambda: marketplace.status()["failed_attempts"] >= 2)  # probing, not answering
            chat = await client.post("/v1/chat/completions", headers=READ, json={
                "model": "fake-qwen", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
            assert chat.status_code == 200
        finally:
            marketplace.engine, marketplace.db_factory = working
            await lost.dispose()
        # Back: the next request is served at once, and the probe reports ready.
        assert (await client.get(f"/api/suppliers/{supplier['id']}", headers=READ)).status_code == 200
        await until(lambda: marketplace.status()["ready"])


async def test_an_unsupported_database_url_is_a_configuration_error(fake_engine):
    # Refused with the settings, before anything connects (stack-gateway turns it into its start-up
    # refusal, exit 2): the gateway's URL the marketplace shares, and the marketplace's own.
    with pytest.raises(ValueError, match="DATABASE_URL must be a sqlite"):
        make_settings(database_url="mysql://root@127.0.0.1/market", vllm_base_url=fake_engine.base_url)
    with pytest.raises(ValueError, match="MARKETPLACE_DATABASE_URL must be a sqlite"):
        MarketplaceSettings(marketplace_database_url="mysql://root@127.0.0.1/market")


# --- which errors are outages: real errors from the real drivers ---------------------------------------


async def real_error(url: str, statement: str = "SELECT 1", **engine_options) -> BaseException:
    engine = create_engine(url, **engine_options)
    try:
        async with engine.connect() as connection:
            await connection.execute(text(statement))
    except Exception as exc:
        return exc
    finally:
        await engine.dispose()
    raise AssertionError(f"{statement} on {url} did not fail")


async def test_unreachable_databases_are_outages(tmp_path):
    refused = await real_error(nobody_listens())
    assert is_outage(refused) and outage_kind(refused) == "connection refused"
    unresolvable = await real_error("postgresql+asyncpg://postgres@no-such-host.invalid/market")
    assert is_outage(unresolvable) and outage_kind(unresolvable) == "host not found"
    (tmp_path / "file").write_text("")
    unopenable = await real_error(f"sqlite+aiosqlite:///{tmp_path}/file/market.db")
    assert is_outage(unopenable) and outage_kind(unopenable) == "cannot open the file"


async def test_an_exhausted_pool_is_an_outage(tmp_path):
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path}/market.db", pool_size=1, max_overflow=0,
                           pool_timeout=0.01)
    try:
        async with engine.connect():
            with pytest.raises(sa_exc.TimeoutError) as raised:
                async with engine.connect():
                    pass
    finally:
        await engine.dispose()
    assert is_outage(raised.value) and outage_kind(raised.value) == "timeout"


async def test_a_locked_or_full_sqlite_file_is_an_outage():
    for message, kind in (("database is locked", "database locked"), ("database or disk is full", "disk full")):
        error = sa_exc.OperationalError("INSERT ...", {}, sqlite3.OperationalError(message))
        assert is_outage(error) and outage_kind(error) == kind


async def test_bugs_in_a_statement_are_not_outages(tmp_path):
    url = f"sqlite+aiosqlite:///{tmp_path}/market.db"
    assert not is_outage(await real_error(url, "SELECT * FROM no_such_table"))
    assert not is_outage(await real_error(url, "SELEKT 1"))
    assert not is_outage(ConnectionRefusedError(111, "raised by the marketplace's own code, not a driver"))
    assert not is_outage(ValueError("not a database error"))
