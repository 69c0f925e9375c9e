"""An app key's end-user limits hold for each of its marketplace users (issue 24).

A database app key with ``limits.end_user`` registers two users and mints each a token. A
user's token carries the app key's limits, so its chats count against that user's share: one
user at its limit is refused (429, saying it is the end user's limit) while the other goes on,
and the app key chatting for that same user (``user_id``) is counted as that user too.
"""

from __future__ import annotations

from tests.marketplace.support import WRITE, add_user, client, database_url, fake_engine, settings


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


async def app_key(client, limits: dict) -> dict:
    created = await client.post("/admin/keys", json={"name": "toko", "role": "app", "limits": limits}, headers=WRITE)
    assert created.status_code == 201, created.text
    return bearer(created.json()["key"])


async def token_for(client, user_id: str, app: dict) -> dict:
    minted = await client.post(f"/api/users/{user_id}/tokens", json={}, headers=app)
    assert minted.status_code == 201, minted.text
    return bearer(minted.json()["token"])


async def talk(client, headers: dict, **body):
    return await client.post("/api/chat", json={"message": "ada kopi?", **body}, headers=headers)


async def test_each_user_of_an_app_key_has_its_own_share_of_the_keys_limits(client, fake_engine):
    app = await app_key(client, {"rpm": 100, "end_user": {"rpm": 2}})
    ani = (await add_user(client, email="ani@example.com", headers=app))["id"]
    budi = (await add_user(client, email="budi@example.com", headers=app))["id"]
    ani_token, budi_token = await token_for(client, ani, app), await token_for(client, budi, app)

    assert (await talk(client, ani_token)).status_code == 200
    assert (await talk(client, app, user_id=ani)).status_code == 200  # the app for Ani: Ani's share too
    asked = len(fake_engine.received)
    refused = await talk(client, ani_token)
    assert refused.status_code == 429, refused.text
    assert "this end user is at its limit of requests per minute" in refused.text
    assert int(refused.headers["retry-after"]) >= 1 and refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert (await talk(client, app, user_id=ani)).status_code == 429
    assert len(fake_engine.received) == asked  # refused before the engine was asked

    assert (await talk(client, budi_token)).status_code == 200  # another user of the same key goes on
    assert fake_engine.received[-1].json["user"] == budi


async def test_a_users_token_counts_against_the_app_keys_own_limits(client):
    app = await app_key(client, {"rpm": 1})
    ani = (await add_user(client, email="ani@example.com", headers=app))["id"]
    budi = (await add_user(client, email="budi@example.com", headers=app))["id"]
    assert (await talk(client, await token_for(client, ani, app))).status_code == 200
    refused = await talk(client, await token_for(client, budi, app))
    assert refused.status_code == 429 and "this API key is at its limit of requests per minute" in refused.text
