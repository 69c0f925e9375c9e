"""A gateway started while its own database is down, or stuck: each feature of it degrades alone, then recovers.

While the database cannot be migrated, database keys and ``/admin`` answer 503
``key_store_unavailable`` and files, batches and webhooks 503 ``jobs_store_unavailable``; the
engine routes serve with configured keys, and ``/health`` says why. Once the database
answers, the background migration brings every one of them back without a restart. A
statement the database never finishes (a table locked by someone else) is a 503 after
``DATABASE_STATEMENT_TIMEOUT_SECONDS``, not a hung request.
"""

from __future__ import annotations

import asyncio

import asyncpg
import httpx

from gateway.database.migrations import runner
from tests.support.gateway import READ_KEY, WRITE_KEY, bearer, serving
from tests.support.waiting import until

UNKNOWN_DATABASE_KEY = "sk-gw-" + "a" * 43


async def assert_degraded(gateway: httpx.AsyncClient) -> None:
    """The gateway serves the engine with configured keys; what lives in its database answers 503."""
    assert (await gateway.get("/v1/models", headers=bearer(READ_KEY))).status_code == 200
    admin = await gateway.get("/admin/keys", headers=bearer(WRITE_KEY))
    assert admin.status_code == 503 and admin.headers["retry-after"] == "1", admin.text
    unknown = await gateway.get("/v1/models", headers=bearer(UNKNOWN_DATABASE_KEY))
    assert unknown.status_code == 503 and unknown.json()["error"]["code"] == "key_store_unavailable"
    for path in ("/v1/files", "/v1/batches", "/admin/webhooks"):
        answer = await gateway.get(path, headers=bearer(WRITE_KEY))
        assert answer.status_code == 503, (path, answer.text)
        assert answer.json()["error"]["code"] == "jobs_store_unavailable", (path, answer.text)
    anthropic = await gateway.get("/v1/messages/batches", headers=bearer(WRITE_KEY))  # Anthropic's envelope
    assert anthropic.status_code == 503 and anthropic.json()["error"]["type"] == "overloaded_error", anthropic.text
    features = (await gateway.get("/health", headers=bearer(WRITE_KEY))).json()["features"]
    assert features["database"]["ready"] is False and features["database"]["error"]
    assert features["keys"]["ready"] is False and features["keys"]["store"] == "down"


async def serves_again(gateway: httpx.AsyncClient) -> bool:
    admin = await gateway.get("/admin/keys", headers=bearer(WRITE_KEY))
    files = await gateway.get("/v1/files", headers=bearer(READ_KEY))
    return admin.status_code == 200 and files.status_code == 200


async def assert_recovered(gateway: httpx.AsyncClient) -> None:
    await until(lambda: serves_again(gateway), timeout=90, what="keys and files serving again", interval=0.2)
    created = await gateway.post("/admin/keys", json={"name": "after the outage"}, headers=bearer(WRITE_KEY))
    assert created.status_code == 201, created.text
    assert (await gateway.get("/v1/models", headers=bearer(created.json()["key"]))).status_code == 200
    assert (await gateway.get("/v1/batches", headers=bearer(created.json()["key"]))).status_code == 200
    features = (await gateway.get("/health", headers=bearer(WRITE_KEY))).json()["features"]
    assert features["database"] == {"ready": True, "backend": features["database"]["backend"], "error": None}
    assert features["keys"]["ready"] is True and features["keys"]["store"] == "up"


async def test_a_sqlite_file_that_cannot_be_made_degrades_its_features_until_it_can(make_settings, tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the database's directory should be")
    settings = make_settings(api_keys=[READ_KEY], admin_api_keys=[WRITE_KEY],
                             database_url=f"sqlite+aiosqlite:///{blocker}/gateway.db")
    async with serving(settings, features={}) as gateway:
        await assert_degraded(gateway)
        blocker.unlink()  # the operator fixes it: the next attempt migrates
        await assert_recovered(gateway)


async def test_a_postgresql_server_down_at_start_degrades_its_features_until_it_is_back(make_settings,
                                                                                        stoppable_postgres):
    url = stoppable_postgres.server.database_url("postgres")
    stoppable_postgres.stop_server()
    settings = make_settings(api_keys=[READ_KEY], admin_api_keys=[WRITE_KEY], database_url=url)
    async with serving(settings, features={}) as gateway:
        await assert_degraded(gateway)
        await asyncio.to_thread(stoppable_postgres.start_server)
        await assert_recovered(gateway)


async def test_a_statement_that_never_ends_is_a_503_not_a_hung_request(make_settings, postgres_database_url,
                                                                       postgres_server):
    await asyncio.to_thread(runner.upgrade, postgres_database_url)
    settings = make_settings(api_keys=[READ_KEY], admin_api_keys=[WRITE_KEY], database_url=postgres_database_url,
                             database_statement_timeout_seconds=1.0)
    dsn = postgres_server.dsn_for(postgres_database_url.rsplit("/", 1)[1])
    async with serving(settings, features={}) as gateway:
        assert await serves_again(gateway)
        blocker = await asyncpg.connect(dsn)
        try:
            async with blocker.transaction():  # another client holds both tables: every statement on them waits
                await blocker.execute("LOCK TABLE gateway_teams, gateway_keys, gateway_files IN ACCESS EXCLUSIVE MODE")
                admin = await gateway.get("/admin/keys", headers=bearer(WRITE_KEY))
                assert admin.status_code == 503, admin.text
                files = await gateway.get("/v1/files", headers=bearer(READ_KEY))
                assert files.status_code == 503 and files.json()["error"]["code"] == "jobs_store_unavailable"
        finally:
            await blocker.close()
        await until(lambda: serves_again(gateway), timeout=60, what="serving after the lock", interval=0.2)
