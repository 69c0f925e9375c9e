"""The clean-up (marketplace.cleanup): dead tokens, tokens of removed keys, conversations past retention.

Passes are run by hand with a chosen ``now`` (rows are dated by writing their timestamps), and
once by the running feature's own timer. Removing a key from the configuration is a restart of
the gateway with the same database and without the key: its tokens are refused at once, and the
next pass deletes them.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from sqlalchemy import text

from gateway.config import Settings
from marketplace.cleanup import Cleanup
from marketplace.database.tables import utcnow
from marketplace.errors import DatabaseUnavailable
from marketplace.feature import MarketplaceFeature
from marketplace.settings import MarketplaceSettings
from tests.marketplace.support import (
    APP,
    APP_KEY,
    OTHER_APP,
    OTHER_APP_KEY,
    READ_KEY,
    WRITE,
    add_user,
    count_rows,
    database_url,
    fake_engine,
    running_app,
    settings,
)

DEADLINE_SECONDS = 30
DAY = timedelta(days=1)


def with_marketplace(**overrides) -> dict:
    """``create_app`` options: the marketplace with these settings of its own."""
    return {"features": {"marketplace": lambda gateway: MarketplaceFeature(gateway, MarketplaceSettings(**overrides))}}


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


async def mint(client, user_id: str, headers: dict = APP) -> dict:
    response = await client.post(f"/api/users/{user_id}/tokens", json={}, headers=headers)
    assert response.status_code == 201, response.text
    return response.json()


async def execute(client, statement: str, **values) -> None:
    async with client.app.state.marketplace.db_factory() as db:
        await db.execute(text(statement), values)
        await db.commit()


async def chat(client, user_id: str, name: str, headers: dict = APP) -> str:
    response = await client.post("/api/chat", json={"user_id": user_id, "message": "ada kopi?", "session_id": name},
                                 headers=headers)
    assert response.status_code == 200, response.text
    return response.json()["conversation_id"]


async def age_conversation(client, conversation_id: str, days: float) -> None:
    """Make a conversation look last used ``days`` ago (its messages too)."""
    then = utcnow() - timedelta(days=days)
    await execute(client, "UPDATE conversations SET last_active_at = :then WHERE public_id = :id", then=then,
                  id=conversation_id)


def pass_of(client):
    return client.app.state.marketplace.cleanup.run_pass


@pytest.fixture
async def client(settings):
    async with running_app(settings, **with_marketplace(marketplace_conversation_retention_days=30)) as client:
        yield client


async def test_a_pass_deletes_expired_and_revoked_tokens_and_keeps_live_ones(client):
    user = (await add_user(client))["id"]
    live, expiring, revoked = [await mint(client, user) for _ in range(3)]
    assert (await client.delete(f"/api/users/{user}/tokens/{revoked['token_id']}", headers=APP)).status_code == 204
    await execute(client, "UPDATE user_tokens SET expires_at = :then WHERE id = :id",
                  then=utcnow() - timedelta(seconds=1), id=expiring["token_id"])

    done = await pass_of(client)()
    assert (done.dead_tokens, done.orphan_tokens, done.full) == (2, 0, False)
    assert await count_rows(client, "user_tokens") == 1
    assert (await client.get(f"/api/users/{user}", headers=bearer(live["token"]))).status_code == 200
    assert (await pass_of(client)()).deleted == 0  # nothing left to do


async def test_conversations_past_retention_go_with_their_messages_and_recent_ones_stay(client):
    user = (await add_user(client))["id"]
    old, recent, borderline = [await chat(client, user, name) for name in ("lama", "baru", "batas")]
    await age_conversation(client, old, days=31)
    await age_conversation(client, recent, days=29)
    await age_conversation(client, borderline, days=30)

    done = await pass_of(client)(now=utcnow() + timedelta(seconds=60))  # the 30-day one is a minute past it
    assert (done.messages, done.conversations) == (4, 2)
    assert (await client.get(f"/api/conversations/{recent}", headers=APP)).status_code == 200
    for gone in (old, borderline):
        assert (await client.get(f"/api/conversations/{gone}", headers=APP)).status_code == 404
    assert await count_rows(client, "messages") == 2
    # A conversation used again is young again: the name starts afresh after the deletion, the
    # kept one moves its last use forward.
    assert await chat(client, user, "lama") != old
    await chat(client, user, "baru")
    assert (await pass_of(client)(now=utcnow() + 29 * DAY)).deleted == 0


async def test_a_pass_deletes_a_bounded_batch_and_the_next_passes_finish_the_backlog(settings):
    async with running_app(settings, **with_marketplace(marketplace_conversation_retention_days=1,
                                                       marketplace_cleanup_batch=3)) as client:
        user = (await add_user(client))["id"]
        for index in range(5):
            await age_conversation(client, await chat(client, user, f"c-{index}"), days=2)
        assert await count_rows(client, "messages") == 10
        passes = []
        while not passes or passes[-1].full:
            assert len(passes) < 10, passes
            passes.append(await pass_of(client)())
        assert all(done.messages <= 3 and done.conversations <= 3 for done in passes)
        assert sum(done.messages for done in passes) == 10 and sum(done.conversations for done in passes) == 5
        assert await count_rows(client, "conversations") == 0


async def test_retention_zero_keeps_conversations_until_their_user_is_erased(settings):
    async with running_app(settings, **with_marketplace(marketplace_conversation_retention_days=0)) as client:
        user = (await add_user(client))["id"]
        await age_conversation(client, await chat(client, user, "tua"), days=10_000)
        assert (await pass_of(client)()).deleted == 0
        assert await count_rows(client, "messages") == 2


async def test_removing_a_key_from_the_configuration_revokes_the_tokens_it_issued(database_url, fake_engine):
    def gateway_settings(**keys) -> Settings:
        values = dict(vllm_base_url=fake_engine.base_url, database_url=database_url, api_keys=[READ_KEY],
                      app_api_keys=[APP_KEY, OTHER_APP_KEY], session_store="off", access_log=False,
                      engine_poll_interval=60, default_max_tokens=8)
        return Settings(**{**values, **keys})

    async with running_app(gateway_settings()) as client:
        ours, theirs = (await add_user(client))["id"], (await add_user(client, headers=OTHER_APP))["id"]
        our_token, their_token = (await mint(client, ours))["token"], (await mint(client, theirs, OTHER_APP))["token"]
    # OTHER_APP_KEY leaves the configuration (as a read key it could no longer act for users either).
    async with running_app(gateway_settings(app_api_keys=[APP_KEY], api_keys=[READ_KEY, OTHER_APP_KEY])) as client:
        refused = await client.get(f"/api/users/{theirs}", headers=bearer(their_token))
        assert refused.status_code == 401 and refused.json() == {"detail": "invalid, expired or revoked end-user token"}
        assert (await client.get(f"/api/users/{ours}", headers=bearer(our_token))).status_code == 200
        done = await pass_of(client)()
        assert (done.dead_tokens, done.orphan_tokens) == (0, 1)
        assert await count_rows(client, "user_tokens") == 1
        assert (await client.get(f"/api/users/{ours}", headers=bearer(our_token))).status_code == 200


async def test_the_feature_runs_the_passes_itself(settings):
    async with running_app(settings, **with_marketplace(marketplace_conversation_retention_days=1,
                                                       marketplace_cleanup_interval_seconds=0.05)) as client:
        user = (await add_user(client))["id"]
        await age_conversation(client, await chat(client, user, "lama"), days=2)
        deadline = asyncio.get_running_loop().time() + DEADLINE_SECONDS
        while await count_rows(client, "conversations"):
            assert asyncio.get_running_loop().time() < deadline, "no pass deleted the old conversation"
            await asyncio.sleep(0.05)
        assert await count_rows(client, "messages") == 0


async def test_a_failing_pass_never_ends_the_clean_up(settings):
    async with running_app(settings) as client:
        marketplace = client.app.state.marketplace
        failures = [DatabaseUnavailable(problem="starting", starting=True, retry_after=1), ValueError("a bug")]
        passes = asyncio.Event()

        def database():
            if failures:
                raise failures.pop(0)
            passes.set()
            return marketplace.database()

        settings_ = MarketplaceSettings(marketplace_cleanup_interval_seconds=0.01)
        cleanup = Cleanup(database=database, availability=marketplace.availability,
                          key_acts_for_users=marketplace.gateway.key_acts_for_users, settings=settings_)
        cleanup.start()
        try:
            await asyncio.wait_for(passes.wait(), DEADLINE_SECONDS)
        finally:
            await cleanup.stop()
        assert failures == [] and marketplace.availability.ready  # a bug is no outage


async def test_revoking_a_database_key_revokes_the_tokens_it_issued(client):
    """Keys kept in the gateway's database (docs/keys.md) are asked about through the same check."""
    created = await client.post("/admin/keys", json={"name": "toko", "role": "app"}, headers=WRITE)
    assert created.status_code in (200, 201), created.text
    shop = bearer(created.json()["key"])
    user = (await add_user(client, headers=shop))["id"]
    token = bearer((await mint(client, user, shop))["token"])
    assert (await client.get(f"/api/users/{user}", headers=token)).status_code == 200
    assert (await pass_of(client)()).orphan_tokens == 0  # a live database key keeps its tokens

    assert (await client.delete(f"/admin/keys/{created.json()['id']}", headers=WRITE)).status_code in (200, 204)
    refused = await client.get(f"/api/users/{user}", headers=token)
    assert refused.status_code == 401 and refused.json() == {"detail": "invalid, expired or revoked end-user token"}
    assert (await pass_of(client)()).orphan_tokens == 1
    assert await count_rows(client, "user_tokens") == 0
