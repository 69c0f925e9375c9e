"""DELETE /api/users/{id}: a user's personal data, conversations, messages and tokens go (issue 29 item 6).

The owning app key or any admin key may erase a user; another app key gets the 404 of an id
that does not exist, and a read key or an end-user token is refused by role. A chat that was
waiting for the engine when its user was erased stores nothing, streamed or not.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from sqlalchemy import text

from tests.marketplace.support import (
    APP,
    OTHER_APP,
    READ,
    WRITE,
    add_user,
    client,
    count_rows,
    database_url,
    make_settings,
    running_app,
    settings,
)
from tests.support.fake_engine import FakeEngine

DEADLINE_SECONDS = 30


class GatedEngine(FakeEngine):
    """The fake vLLM, holding every answer until ``gate`` is set (streams: ``hold``, after their headers)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.gate = asyncio.Event()
        self.hold = asyncio.Event()
        self.held = 0  # answers waiting at the gate now

    async def _complete(self, request):
        if not (await request.json()).get("stream"):
            self.held += 1
            try:
                await self.gate.wait()
            finally:
                self.held -= 1
        return await super()._complete(request)


@pytest.fixture
async def fake_engine():
    engine = await GatedEngine(models=["fake-qwen"]).start()
    engine.gate.set()
    engine.hold.set()
    yield engine
    engine.gate.set()
    engine.hold.set()
    await engine.stop()


async def rows_of(client, user_id: str) -> dict[str, int]:
    """How many rows of each table still hold something of this user."""
    async with client.app.state.marketplace.db_factory() as db:
        counts = {}
        for table, where in (
            ("users", "public_id = :user"),
            ("conversations", "user_id IN (SELECT id FROM users WHERE public_id = :user)"),
            ("user_tokens", "user_id IN (SELECT id FROM users WHERE public_id = :user)"),
        ):
            counts[table] = await db.scalar(text(f"SELECT count(*) FROM {table} WHERE {where}"), {"user": user_id})
        return counts


async def chat(client, headers, **body):
    return await client.post("/api/chat", json={"message": "ada kopi?", **body}, headers=headers)


async def until(condition, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + DEADLINE_SECONDS
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"waited {DEADLINE_SECONDS} s for {what}"
        await asyncio.sleep(0.01)


async def test_the_owning_app_erases_a_user_with_conversations_messages_and_tokens(client, fake_engine):
    sari = await add_user(client, email="sari@example.com")
    other = await add_user(client, email="budi@example.com")
    for user, name in ((sari, "sari-1"), (sari, "sari-2"), (other, "budi-1")):
        assert (await chat(client, APP, user_id=user["id"], session_id=name)).status_code == 200
    conversation = (await chat(client, APP, user_id=sari["id"], session_id="sari-1")).json()["conversation_id"]
    token = (await client.post(f"/api/users/{sari['id']}/tokens", json={}, headers=APP)).json()["token"]
    assert await count_rows(client, "messages") == 8

    response = await client.delete(f"/api/users/{sari['id']}", headers=APP)
    assert response.status_code == 204 and response.content == b""
    assert await rows_of(client, sari["id"]) == {"users": 0, "conversations": 0, "user_tokens": 0}
    assert await count_rows(client, "messages") == 2  # only Budi's exchange is left
    assert (await client.get(f"/api/users/{sari['id']}", headers=APP)).status_code == 404
    assert (await client.get(f"/api/conversations/{conversation}", headers=APP)).status_code == 404
    assert (await client.get(f"/api/users/{sari['id']}", headers={"Authorization": f"Bearer {token}"})).json() == \
        {"detail": "invalid, expired or revoked end-user token"}
    assert (await client.delete(f"/api/users/{sari['id']}", headers=APP)).status_code == 404  # gone is gone
    assert (await client.get(f"/api/users/{other['id']}", headers=APP)).json()["email"] == "budi@example.com"
    # The same email may be registered again: a new user, knowing nothing of the old one.
    again = await add_user(client, email="sari@example.com")
    assert again["id"] != sari["id"]
    assert (await chat(client, APP, user_id=again["id"], session_id="sari-1")).status_code == 200
    assert [m["content"] for m in fake_engine.last.json["messages"][1:]] == ["ada kopi?"]  # no old history
    assert await count_rows(client, "conversations") == 2


async def test_another_app_cannot_erase_our_user_and_learns_nothing(client):
    ours = await add_user(client, email="ani@example.com")
    for user_id in (ours["id"], str(uuid.uuid4())):  # ours answers exactly like an id nobody has
        response = await client.delete(f"/api/users/{user_id}", headers=OTHER_APP)
        assert response.status_code == 404 and response.json() == {"detail": f"user {user_id} not found"}
    assert await rows_of(client, ours["id"]) == {"users": 1, "conversations": 0, "user_tokens": 0}


async def test_an_admin_key_erases_any_user_and_other_callers_are_refused_by_role(client):
    ours = await add_user(client, email="ani@example.com")
    token = (await client.post(f"/api/users/{ours['id']}/tokens", json={}, headers=APP)).json()["token"]
    assert (await client.delete(f"/api/users/{ours['id']}", headers=READ)).status_code == 403
    own_token = await client.delete(f"/api/users/{ours['id']}", headers={"Authorization": f"Bearer {token}"})
    assert own_token.status_code == 401  # the app decides; its user's token cannot erase
    assert await rows_of(client, ours["id"]) == {"users": 1, "conversations": 0, "user_tokens": 1}
    assert (await client.delete(f"/api/users/{ours['id']}", headers=WRITE)).status_code == 204
    assert await rows_of(client, ours["id"]) == {"users": 0, "conversations": 0, "user_tokens": 0}


async def test_a_chat_answered_after_its_user_was_erased_stores_nothing(client, fake_engine):
    sari = await add_user(client, email="sari@example.com")
    fake_engine.gate.clear()
    waiting = asyncio.create_task(chat(client, APP, user_id=sari["id"], session_id="sari-1"))
    await until(lambda: fake_engine.held, "the chat to reach the engine")
    assert (await client.delete(f"/api/users/{sari['id']}", headers=APP)).status_code == 204
    fake_engine.gate.set()
    response = await waiting
    assert response.status_code == 404 and response.json()["detail"] == f"user_id: user {sari['id']} not found"
    assert await count_rows(client, "conversations") == 0 and await count_rows(client, "messages") == 0


async def test_a_streamed_chat_completed_after_its_user_was_erased_stores_nothing(client, fake_engine):
    sari = await add_user(client, email="sari@example.com")
    fake_engine.hold.clear()
    streaming = asyncio.create_task(chat(client, APP, user_id=sari["id"], session_id="sari-1", stream=True))
    await until(lambda: fake_engine.streams_started, "the stream to start")
    assert await count_rows(client, "conversations") == 1  # opened before the stream, for its header
    assert (await client.delete(f"/api/users/{sari['id']}", headers=APP)).status_code == 204
    fake_engine.hold.set()
    response = await streaming
    assert response.status_code == 200 and response.text.rstrip().endswith("data: [DONE]")
    assert await count_rows(client, "conversations") == 0 and await count_rows(client, "messages") == 0
