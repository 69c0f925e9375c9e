"""End users see only their own data: ownership by key, UUID ids, end-user tokens (issue 14, part 2).

Two app keys (APP and OTHER_APP) stand for two applications; the admin key (WRITE) manages the
catalogue. Each user and conversation belongs to the key that created it: any other key gets
the same 404 as for an id that does not exist. An end-user token reaches its own profile, its
own conversations and /api/chat as itself, and nothing else.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import datetime, timedelta

import pytest
from pydantic import SecretStr
from sqlalchemy import text, update

from marketplace.database.tables import utcnow
from marketplace.users.models import UserToken
from tests.marketplace.support import (
    APP,
    OTHER_APP,
    READ,
    WRITE,
    add_user,
    client,
    count_rows,
    database_url,
    fake_engine,
    running_app,
    settings,
)


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


async def mint(client, user_id: str, *, headers: dict = APP, **body) -> dict:
    response = await client.post(f"/api/users/{user_id}/tokens", json=body, headers=headers)
    assert response.status_code == 201, response.text
    return response.json()


async def talk(client, headers: dict, **body):
    return await client.post("/api/chat", json={"message": "ada kopi?", **body}, headers=headers)


@pytest.fixture
async def two_apps(client):
    """A user of APP with one conversation, and a user of OTHER_APP."""
    ours = await add_user(client, email="ani@example.com")
    theirs = await add_user(client, email="budi@example.com", headers=OTHER_APP)
    chat = await talk(client, APP, user_id=ours["id"], session_id="ani-1")
    assert chat.status_code == 200, chat.text
    return {"ours": ours, "theirs": theirs, "conversation": chat.json()["conversation_id"]}


async def test_users_and_conversations_are_known_by_random_uuids(client, two_apps):
    for public_id in (two_apps["ours"]["id"], two_apps["theirs"]["id"], two_apps["conversation"]):
        assert uuid.UUID(public_id).version == 4 and str(uuid.UUID(public_id)) == public_id
    async with client.app.state.marketplace.db_factory() as db:
        rows = (await db.execute(text("SELECT id, public_id FROM users ORDER BY id"))).all()
    assert [public_id for _, public_id in rows] == [two_apps["ours"]["id"], two_apps["theirs"]["id"]]
    assert all(str(row_id) not in public_id.split("-") for row_id, public_id in rows)


async def test_another_app_key_sees_none_of_our_users_data(client, two_apps, fake_engine):
    ours, conversation = two_apps["ours"]["id"], two_apps["conversation"]
    nobody = str(uuid.uuid4())
    asked = len(fake_engine.received)
    for user_id in (ours, nobody):  # a user of another key answers exactly like one that does not exist
        assert (await client.get(f"/api/users/{user_id}", headers=OTHER_APP)).json() == \
            {"detail": f"user {user_id} not found"}
        assert (await client.patch(f"/api/users/{user_id}", json={"name": "X"}, headers=OTHER_APP)).status_code == 404
        assert (await client.post(f"/api/users/{user_id}/tokens", json={}, headers=OTHER_APP)).status_code == 404
        assert (await client.delete(f"/api/users/{user_id}/tokens", headers=OTHER_APP)).status_code == 404
        chat = await talk(client, OTHER_APP, user_id=user_id)
        assert chat.status_code == 404 and chat.json()["detail"] == f"user_id: user {user_id} not found"
    for conversation_id in (conversation, nobody):
        response = await client.get(f"/api/conversations/{conversation_id}", headers=OTHER_APP)
        assert response.json() == {"detail": f"conversation {conversation_id} not found"}
    assert len(fake_engine.received) == asked  # nothing reached the engine for them
    assert (await client.get(f"/api/users/{ours}", headers=APP)).json()["name"] == "Ani"  # unchanged
    # The admin key manages the catalogue; it does not see the applications' users either.
    assert (await client.get(f"/api/users/{ours}", headers=WRITE)).status_code == 404
    assert (await client.get(f"/api/conversations/{conversation}", headers=WRITE)).status_code == 404


async def test_another_apps_user_may_use_our_conversation_name_and_learns_nothing(client, two_apps, fake_engine):
    theirs = two_apps["theirs"]["id"]
    same_name = await talk(client, OTHER_APP, user_id=theirs, session_id="ani-1")  # the name ours uses
    new_name = await talk(client, OTHER_APP, user_id=theirs, session_id="budi-1")
    assert same_name.status_code == new_name.status_code == 200
    assert same_name.json()["conversation_id"] != two_apps["conversation"]
    assert [m["content"] for m in fake_engine.received[-2].json["messages"][1:]] == ["ada kopi?"]  # no history of ours
    ours = await client.get(f"/api/conversations/{two_apps['conversation']}", headers=APP)
    assert [m["role"] for m in ours.json()["messages"]] == ["user", "assistant"]  # untouched


async def test_a_token_reaches_its_own_profile_conversations_and_chat(client, two_apps, fake_engine):
    ours = two_apps["ours"]
    minted = await mint(client, ours["id"], ttl_seconds=600)
    assert minted["user_id"] == ours["id"] and minted["token"].startswith("mpu_")
    token = bearer(minted["token"])

    assert (await client.get(f"/api/users/{ours['id']}", headers=token)).json() == ours
    chat = await talk(client, token, session_id="ani-1")  # no user_id: the token's user
    assert chat.status_code == 200, chat.text
    assert chat.json()["conversation_id"] == two_apps["conversation"]
    named = await talk(client, token, user_id=ours["id"], session_id="ani-2")
    assert named.status_code == 200, named.text
    conversation = await client.get(f"/api/conversations/{two_apps['conversation']}", headers=token)
    assert conversation.status_code == 200
    assert [m["role"] for m in conversation.json()["messages"]] == ["user", "assistant"] * 2
    streamed = await talk(client, token, session_id="ani-3", stream=True)
    assert streamed.status_code == 200 and streamed.text.rstrip().endswith("data: [DONE]")
    assert (await client.get(f"/api/conversations/{streamed.headers['x-conversation-id']}",
                             headers=token)).status_code == 200
    # The conversations it started belong to the app key that minted the token.
    assert (await client.get(f"/api/conversations/{named.json()['conversation_id']}", headers=APP)).status_code == 200


async def test_a_token_gets_404_for_every_other_user(client, two_apps, fake_engine):
    ours = two_apps["ours"]
    sibling = await add_user(client, email="citra@example.com")  # same app, another user
    sibling_chat = await talk(client, APP, user_id=sibling["id"])
    token = bearer((await mint(client, ours["id"]))["token"])
    asked = len(fake_engine.received)
    for other in (sibling["id"], two_apps["theirs"]["id"]):
        assert (await client.get(f"/api/users/{other}", headers=token)).json() == {"detail": f"user {other} not found"}
        chat = await talk(client, token, user_id=other)
        assert chat.status_code == 404 and chat.json()["detail"] == f"user_id: user {other} not found"
    response = await client.get(f"/api/conversations/{sibling_chat.json()['conversation_id']}", headers=token)
    assert response.status_code == 404
    assert len(fake_engine.received) == asked


@pytest.mark.parametrize(("method", "path", "body"), [
    ("POST", "/v1/chat/completions", {"model": "fake-qwen", "messages": [{"role": "user", "content": "hi"}]}),
    ("GET", "/v1/models", None),
    ("GET", "/api/products/search?q=kopi", None),
    ("GET", "/api/categories", None),
    ("POST", "/api/users", {"name": "X", "email": "x@example.com"}),
    ("PATCH", "/api/users/{user}", {"name": "X"}),
    ("POST", "/api/users/{user}/tokens", {}),
    ("DELETE", "/api/users/{user}/tokens", None),
])
async def test_a_token_reaches_nothing_else(client, two_apps, fake_engine, method, path, body):
    user = two_apps["ours"]["id"]
    token = bearer((await mint(client, user))["token"])
    asked = len(fake_engine.received)
    before = {t: await count_rows(client, t) for t in ("users", "user_tokens")}
    response = await client.request(method, path.format(user=user), json=body, headers=token)
    assert response.status_code == 401, response.text
    assert len(fake_engine.received) == asked
    assert {t: await count_rows(client, t) for t in before} == before
    assert (await client.get(f"/api/users/{user}", headers=token)).status_code == 200  # still valid


async def test_an_expired_token_is_refused(client, two_apps):
    user = two_apps["ours"]["id"]
    minted = await mint(client, user, ttl_seconds=60)
    token = bearer(minted["token"])
    assert (await client.get(f"/api/users/{user}", headers=token)).status_code == 200
    async with client.app.state.marketplace.db_factory() as db:  # the minute has passed
        await db.execute(update(UserToken).where(UserToken.id == minted["token_id"])
                              .values(expires_at=utcnow() - timedelta(seconds=1)))
        await db.commit()
    response = await client.get(f"/api/users/{user}", headers=token)
    assert response.status_code == 401 and "expired" in response.json()["detail"]
    assert (await talk(client, token)).status_code == 401


async def test_tokens_are_revoked_one_by_one_or_all_at_once(client, two_apps):
    user = two_apps["ours"]["id"]
    first, second, third = [await mint(client, user) for _ in range(3)]
    assert (await client.delete(f"/api/users/{user}/tokens/{first['token_id']}", headers=APP)).status_code == 204
    assert (await client.get(f"/api/users/{user}", headers=bearer(first["token"]))).status_code == 401
    assert (await client.get(f"/api/users/{user}", headers=bearer(second["token"]))).status_code == 200
    # Another app cannot revoke them, nor learn they exist.
    assert (await client.delete(f"/api/users/{user}/tokens/{second['token_id']}",
                                headers=OTHER_APP)).status_code == 404
    assert (await client.delete(f"/api/users/{user}/tokens/{uuid.uuid4()}", headers=APP)).status_code == 404
    assert (await client.delete(f"/api/users/{user}/tokens", headers=APP)).status_code == 204
    for minted in (second, third):
        assert (await client.get(f"/api/users/{user}", headers=bearer(minted["token"]))).status_code == 401
    assert (await talk(client, bearer(third["token"]))).status_code == 401


async def test_only_the_tokens_hash_is_stored(client, two_apps):
    minted = await mint(client, two_apps["ours"]["id"])
    async with client.app.state.marketplace.db_factory() as db:
        rows = [dict(row._mapping) for row in await db.execute(text("SELECT * FROM user_tokens"))]
    assert len(rows) == 1
    assert rows[0]["token_hash"] == hashlib.sha256(minted["token"].encode()).hexdigest()
    assert minted["token"] not in json.dumps(rows, default=str)


async def test_a_token_outlives_a_restart_and_works_on_every_replica(settings):
    # Replicas share the database and KEY_ID_SECRET (docs/openai.md): they agree on key ids, so owners.
    shared = settings.model_copy(update={"key_id_secret": SecretStr("replicas-share-this-secret-0001")})
    async with running_app(shared) as first:
        user = (await add_user(first))["id"]
        token = bearer((await mint(first, user))["token"])
    # A second gateway on the same database: this one after a restart, or another replica.
    async with running_app(shared) as replica:
        assert (await replica.get(f"/api/users/{user}", headers=token)).status_code == 200
        assert (await replica.get(f"/api/users/{user}", headers=APP)).status_code == 200  # same key id
        assert (await replica.get(f"/api/users/{user}", headers=OTHER_APP)).status_code == 404


async def test_token_lifetimes_are_bounded(client, two_apps):
    user = two_apps["ours"]["id"]
    before = utcnow()
    default = await mint(client, user)
    after = utcnow()
    expires = datetime.fromisoformat(default["expires_at"])
    assert before + timedelta(hours=1) <= expires <= after + timedelta(hours=1)  # an hour unless asked otherwise
    for ttl in (59, 24 * 3600 + 1):
        response = await client.post(f"/api/users/{user}/tokens", json={"ttl_seconds": ttl}, headers=APP)
        assert response.status_code == 422 and response.json()["detail"][0]["loc"][-1] == "ttl_seconds"


async def test_a_garbage_bearer_is_an_invalid_key(client, two_apps):
    user = two_apps["ours"]["id"]
    for token in ("mpu_" + "x" * 43, "mpu_", "mpu_" + "y" * 500, "sk-guess"):
        response = await client.get(f"/api/users/{user}", headers=bearer(token))
        assert response.status_code == 401, token


async def test_a_read_key_is_refused_by_role(client, two_apps):
    response = await client.get(f"/api/users/{two_apps['ours']['id']}", headers=READ)
    assert response.status_code == 403 and "APP_API_KEYS" in response.json()["detail"]
    assert (await client.post(f"/api/users/{two_apps['ours']['id']}/tokens", json={}, headers=READ)).status_code == 403
