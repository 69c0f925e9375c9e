"""A streamed /api/chat is a resumable session named by its conversation: dropped and resumed,
left for good, resumed by someone else; against a fake engine, under real uvicorn (a dropped
connection must really drop), on the sessions store of the marketplace's database.

The fake engine holds each stream after ``HELD_AFTER`` tokens until the test lets it go, so a
client is cut off while the generation is certainly still running.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
import pytest

from gateway.app import create_app
from tests.marketplace.support import APP, OTHER_APP, add_user, database_url, make_settings
from tests.support.fake_engine import FakeEngine
from tests.support.servers import serve_uvicorn
from tests.support.sse_client import fresh_client, read_stream
from tests.support.waiting import until

__all__ = ["database_url"]

TOKENS = 8  # DEFAULT_MAX_TOKENS of make_settings: the fake engine sends t0 .. t7
ANSWER = "".join(f"t{i} " for i in range(TOKENS))
HELD_AFTER = 3  # the engine sends its role chunk and t0 t1 t2, then waits


@pytest.fixture
async def engine() -> AsyncIterator[FakeEngine]:
    fake = await FakeEngine(models=["fake-qwen"], hold=asyncio.Event(), hold_after=HELD_AFTER).start()
    yield fake
    fake.hold.set()
    await fake.stop()


@contextlib.asynccontextmanager
async def marketplace_on_a_port(database_url: str, engine: FakeEngine, **overrides):
    """(client, app): the gateway with sessions in the marketplace's database, under uvicorn."""
    store = "postgres" if database_url.startswith("postgresql") else "sqlite"
    settings = make_settings(database_url=database_url, vllm_base_url=engine.base_url,
                             **{"session_store": store, **overrides})
    app = create_app(settings)
    async with serve_uvicorn(app) as base_url, fresh_client(base_url) as client:
        yield client, app


@pytest.fixture
async def served(database_url, engine):
    async with marketplace_on_a_port(database_url, engine) as running:
        yield running


def generation_of(app, session_id: str):
    """The gateway's in-memory generation of ``session_id`` (whichever key owns it)."""
    found = [g for key, g in list(app.state.sessions._generations.items()) if key.session_id == session_id]
    assert len(found) == 1, found
    return found[0]


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


async def token_for(client: httpx.AsyncClient, user_id: str) -> dict:
    response = await client.post(f"/api/users/{user_id}/tokens", json={}, headers=APP)
    assert response.status_code == 201, response.text
    return bearer(response.json()["token"])


async def stored_messages(client: httpx.AsyncClient, conversation_id: str) -> list[tuple[str, str]]:
    response = await client.get(f"/api/conversations/{conversation_id}", headers=APP)
    assert response.status_code == 200, response.text
    return [(m["role"], m["content"]) for m in response.json()["messages"]]


async def start_and_drop(client: httpx.AsyncClient, app, body: dict, headers: dict):
    """Start a streamed chat, read up to the engine's hold, drop the connection; (received, generation)."""
    first = await read_stream(client, "POST", "/api/chat", json=body, headers=headers, stop_after=1 + HELD_AFTER)
    assert first.status == 200, first.body
    generation = generation_of(app, first.headers["x-conversation-id"])
    await until(lambda: generation.consumers == 0, what="the gateway noticed the client left")
    assert generation.live  # held by the engine: the drop was mid-way
    return first, generation


def chat_body(user_id: str | None = None, **extra) -> dict:
    body = {"message": "ada kopi arabika?", "stream": True, **extra}
    if user_id is not None:
        body["user_id"] = user_id
    return body


def engine_calls(engine: FakeEngine) -> int:
    return sum(1 for r in engine.received if r.path.endswith("/chat/completions"))


async def test_a_dropped_stream_resumed_with_last_event_id_gets_the_rest_and_is_stored_once(served, engine):
    client, app = served
    user = await add_user(client)
    body = chat_body(user["id"], session_id="kopi-1")
    first, generation = await start_and_drop(client, app, body, APP)
    conversation_id = first.headers["x-conversation-id"]
    # The session is the conversation's, by its public id: in the header and in every event's id.
    assert first.session_id == conversation_id
    assert first.headers["x-chat-session-id"] == "kopi-1"
    assert first.indices == list(range(1 + HELD_AFTER))
    assert first.last_id == f"{conversation_id}:{HELD_AFTER}"

    engine.hold.set()
    rest = await read_stream(client, "POST", "/api/chat", json=body,
                             headers={**APP, "Last-Event-ID": first.last_id})
    assert rest.status == 200, rest.body
    assert rest.headers["x-conversation-id"] == conversation_id
    assert first.indices + rest.indices == list(range(len(first.events) + len(rest.events)))
    assert rest.dones == 1 and rest.events[-1].done and first.dones == 0
    assert first.content + rest.content == ANSWER

    await until(lambda: not generation.live, what="the generation ended")
    assert await stored_messages(client, conversation_id) == [("user", "ada kopi arabika?"), ("assistant", ANSWER)]
    # Replaying again (from the start, as a browser's EventSource) stores nothing more, asks no engine.
    again = await read_stream(client, "GET", f"/api/conversations/{conversation_id}/events", headers=APP)
    assert again.status == 200 and again.content == ANSWER and again.dones == 1
    done = await client.get(f"/api/conversations/{conversation_id}/events",
                            headers={**APP, "Last-Event-ID": again.last_id})
    assert done.status_code == 204  # nothing left: an EventSource stops here
    assert await stored_messages(client, conversation_id) == [("user", "ada kopi arabika?"), ("assistant", ANSWER)]
    assert engine_calls(engine) == 1


async def test_a_client_that_leaves_for_good_still_gets_its_answer_stored(served, engine):
    client, app = served
    user = await add_user(client)
    first, generation = await start_and_drop(client, app, chat_body(user["id"]), APP)
    engine.hold.set()  # the engine finishes with nobody connected
    await until(lambda: not generation.live, what="the generation ended")
    assert generation.how == "completed"
    conversation_id = first.headers["x-conversation-id"]
    await until(lambda: _has_answer(client, conversation_id), interval=0.05, what="the answer stored")
    assert await stored_messages(client, conversation_id) == [("user", "ada kopi arabika?"), ("assistant", ANSWER)]


async def _has_answer(client, conversation_id: str) -> bool:
    return len(await stored_messages(client, conversation_id)) == 2


async def test_only_the_conversations_own_user_and_key_may_resume_it(served, engine):
    client, app = served
    ani = await add_user(client, email="ani@example.com")
    citra = await add_user(client, email="citra@example.com")  # the same app's other user
    ani_token, citra_token = await token_for(client, ani["id"]), await token_for(client, citra["id"])
    first, _ = await start_and_drop(client, app, chat_body(session_id="rahasia"), ani_token)
    conversation_id = first.headers["x-conversation-id"]
    resume = {"Last-Event-ID": first.last_id}
    events = f"/api/conversations/{conversation_id}/events"

    # Citra, the other app, and a guess of another id: the 404 of a conversation that does not exist.
    for headers, body in ((citra_token, chat_body(session_id="rahasia")), (citra_token, chat_body()),
                          (OTHER_APP, chat_body(ani["id"])), (APP, chat_body(citra["id"]))):
        refused = await client.post("/api/chat", json=body, headers={**headers, **resume})
        assert refused.status_code == 404, refused.text
        assert refused.json()["detail"] == f"last_event_id: conversation {conversation_id} not found"
    for headers in (citra_token, OTHER_APP):
        assert (await client.get(events, headers={**headers, **resume})).status_code == 404
    unknown = "0f0e0d0c-0b0a-4909-8807-060504030201"
    assert (await client.post("/api/chat", json=chat_body(), headers={**ani_token, "Last-Event-ID": f"{unknown}:0"})
            ).status_code == 404
    assert engine_calls(engine) == 1  # no refused resume started a generation

    engine.hold.set()
    ours = await read_stream(client, "POST", "/api/chat", json=chat_body(session_id="rahasia"),
                             headers={**ani_token, **resume})
    assert ours.status == 200 and first.content + ours.content == ANSWER and ours.dones == 1
    by_the_app = await read_stream(client, "GET", events, headers=APP)  # the key that owns Ani
    assert by_the_app.status == 200 and by_the_app.content == ANSWER


async def test_a_new_message_while_the_answer_streams_is_409_and_stores_nothing(served, engine):
    client, app = served
    user = await add_user(client)
    body = chat_body(user["id"], session_id="sibuk")
    first, generation = await start_and_drop(client, app, body, APP)
    busy = await client.post("/api/chat", json={**body, "message": "dan teh?"}, headers=APP)
    assert busy.status_code == 409, busy.text
    assert "session" in busy.json()["detail"]
    engine.hold.set()
    await until(lambda: not generation.live, what="the generation ended")
    conversation_id = first.headers["x-conversation-id"]
    await until(lambda: _has_answer(client, conversation_id), interval=0.05, what="the answer stored")
    assert await stored_messages(client, conversation_id) == [("user", "ada kopi arabika?"), ("assistant", ANSWER)]


@pytest.mark.parametrize("value", [b"abc:--1", b"5", "x:\u00b2".encode("latin-1"), b"x:99999999999999999999"])
async def test_a_malformed_last_event_id_is_a_400_naming_it(served, engine, value):
    client, _ = served
    user = await add_user(client)
    response = await client.post("/api/chat", json=chat_body(user["id"]), headers={**APP, "Last-Event-ID": value})
    assert response.status_code == 400, response.text
    assert "Last-Event-ID" in response.json()["detail"]
    assert engine_calls(engine) == 0


async def test_a_resume_naming_another_conversation_name_is_a_422(served, engine):
    client, app = served
    user = await add_user(client)
    first, _ = await start_and_drop(client, app, chat_body(user["id"], session_id="satu"), APP)
    engine.hold.set()
    response = await client.post("/api/chat", json=chat_body(user["id"], session_id="dua"),
                                 headers={**APP, "Last-Event-ID": first.last_id})
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == ["body", "session_id"]


async def test_without_sessions_a_resume_is_a_400_and_the_stream_still_works(database_url, engine):
    engine.hold.set()
    async with marketplace_on_a_port(database_url, engine, session_store="off") as (client, _):
        user = await add_user(client)
        plain = await read_stream(client, "POST", "/api/chat", json=chat_body(user["id"]), headers=APP)
        assert plain.status == 200 and plain.content == ANSWER and plain.session_id is None
        conversation_id = plain.headers["x-conversation-id"]
        refused = await client.post("/api/chat", json=chat_body(user["id"]),
                                    headers={**APP, "Last-Event-ID": f"{conversation_id}:1"})
        assert refused.status_code == 400, refused.text
        assert refused.json()["detail"].startswith("resumable sessions are disabled")
        assert (await client.get(f"/api/conversations/{conversation_id}/events", headers=APP)).status_code == 400
