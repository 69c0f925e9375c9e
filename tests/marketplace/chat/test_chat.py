"""/api/chat against a fake engine: access rules, location choice, history, storage, engine failures, streaming."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from tests.marketplace.support import (
    APP,
    JAKARTA,
    READ,
    add_product,
    add_supplier,
    add_user,
    client,
    count_rows,
    database_url,
    fake_engine,
    field_of,
    make_settings,
    running_app,
    settings,
)
from tests.support.asgi_client import post_then_leave
from tests.support.fake_engine import running_fake_engine
from tests.support.waiting import until

SURABAYA = (-7.2575, 112.7521)


def products_in_prompt(payload: dict) -> list[int]:
    system = payload["messages"][0]["content"]
    return [p["product_id"] for p in json.loads(system.partition("MARKETPLACE_DATA (JSON):\n")[2])["products"]]


@pytest.fixture
async def shops(client):
    """A Jakarta and a Surabaya supplier with the same laptop; one sold-out laptop in Jakarta."""
    jakarta = await add_supplier(client, lat=JAKARTA[0], lng=JAKARTA[1], name="Jakarta")
    surabaya = await add_supplier(client, lat=SURABAYA[0], lng=SURABAYA[1], name="Surabaya")
    return {
        "jakarta": await add_product(client, supplier_id=jakarta["id"], name="Laptop Gaming", price=15_000_000),
        "surabaya": await add_product(client, supplier_id=surabaya["id"], name="Laptop Gaming", price=14_000_000),
        "sold_out": await add_product(client, supplier_id=jakarta["id"], name="Laptop Gaming X", stock_quantity=0),
    }


async def chat(client, **body):
    return await client.post("/api/chat", json=body, headers=APP)


async def test_chat_answers_from_nearby_in_stock_products_and_stores_both_messages(client, fake_engine, shops):
    user = await add_user(client, location={"lat": JAKARTA[0], "lng": JAKARTA[1]})
    response = await chat(client, user_id=user["id"], message="laptop gaming budget 20 juta")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["answer"] == "tok " * 8
    ids = [p["product"]["id"] for p in body["products"]]
    assert ids == [shops["jakarta"]["id"]]  # within 50 km and in stock; Surabaya is 660 km away
    assert body["parsed"]["max_price"] == 20_000_000
    assert body["fallback"] == []
    assert products_in_prompt(fake_engine.last.json) == ids
    assert fake_engine.last.json["max_tokens"] == 8 and fake_engine.last.json["temperature"] == 0.0

    stored = (await client.get(f"/api/conversations/{body['conversation_id']}", headers=APP)).json()
    assert stored["session_id"] == body["session_id"] and stored["user_id"] == user["id"]
    user_turn, answer = stored["messages"]
    assert (user_turn["role"], user_turn["content"]) == ("user", "laptop gaming budget 20 juta")
    assert user_turn["details"]["location_source"] == "user"
    assert (answer["role"], answer["content"]) == ("assistant", body["answer"])
    assert answer["details"]["product_ids"] == ids
    assert answer["details"]["model"] == "fake-qwen"


async def test_with_nothing_nearby_the_nearest_matches_anywhere_are_offered(client, fake_engine, shops):
    user = await add_user(client, location={"lat": -6.9667, "lng": 110.4167})  # Semarang
    body = (await chat(client, user_id=user["id"], message="laptop gaming")).json()
    ids = [p["product"]["id"] for p in body["products"]]
    assert ids == [shops["surabaya"]["id"], shops["jakarta"]["id"]]  # 270 km, then 400 km
    assert body["fallback"] == ["widened_radius"]
    assert products_in_prompt(fake_engine.last.json) == ids
    data = json.loads(fake_engine.last.json["messages"][0]["content"].partition("MARKETPLACE_DATA (JSON):\n")[2])
    assert data["search"] == {"location": "user", "radius_km": None, "fallback": ["widened_radius"]}


async def test_a_place_in_the_message_beats_the_users_home(client, fake_engine, shops):
    user = await add_user(client, location={"lat": JAKARTA[0], "lng": JAKARTA[1]})
    body = (await chat(client, user_id=user["id"], message="laptop gaming di Surabaya")).json()
    assert [p["product"]["id"] for p in body["products"]][0] == shops["surabaya"]["id"]
    assert body["fallback"] == []  # only the Surabaya laptop lies within 50 km of Surabaya
    assert len(body["products"]) == 1


async def test_the_request_location_is_used_when_the_user_has_none(client, fake_engine, shops):
    user = await add_user(client)
    body = (await chat(client, user_id=user["id"], message="laptop gaming",
                       location={"lat": SURABAYA[0], "lng": SURABAYA[1]})).json()
    assert [p["product"]["id"] for p in body["products"]] == [shops["surabaya"]["id"]]
    assert body["products"][0]["distance_km"] < 1
    body = (await chat(client, user_id=user["id"], message="laptop gaming", location="-6.2088,106.8456")).json()
    assert [p["product"]["id"] for p in body["products"]] == [shops["jakarta"]["id"]]


async def test_a_session_continues_the_conversation_with_its_history(client, fake_engine, shops):
    user = await add_user(client)
    first = (await chat(client, user_id=user["id"], message="ada laptop?", session_id="sesi-1")).json()
    second = (await chat(client, user_id=user["id"], message="yang paling murah?", session_id="sesi-1")).json()
    assert first["conversation_id"] == second["conversation_id"]
    assert first["session_id"] == second["session_id"] == "sesi-1"
    sent = fake_engine.last.json["messages"]
    assert [(m["role"], m["content"]) for m in sent[1:]] == [
        ("user", "ada laptop?"), ("assistant", first["answer"].strip()), ("user", "yang paling murah?"),
    ]
    stored = (await client.get(f"/api/conversations/{first['conversation_id']}", headers=APP)).json()
    assert [m["role"] for m in stored["messages"]] == ["user", "assistant", "user", "assistant"]


async def test_two_users_may_name_their_conversations_alike_and_never_share_them(client, fake_engine):
    """A conversation's name is the user's own: another user's of the same name is another conversation,
    answered exactly like a new name (issue 29 item 9: no 409 tells anyone a name is taken)."""
    owner = await add_user(client, email="owner@example.com")
    other = await add_user(client, email="other@example.com")
    first = await chat(client, user_id=owner["id"], message="halo dari owner", session_id="sama")
    assert first.status_code == 200
    response = await chat(client, user_id=other["id"], message="halo", session_id="sama")
    assert response.status_code == 200 and response.json()["session_id"] == "sama"
    assert response.json()["conversation_id"] != first.json()["conversation_id"]
    sent = fake_engine.last.json["messages"]
    assert [m["content"] for m in sent[1:]] == ["halo"]  # none of the owner's turns
    mine = (await client.get(f"/api/conversations/{first.json()['conversation_id']}", headers=APP)).json()
    assert [m["content"] for m in mine["messages"] if m["role"] == "user"] == ["halo dari owner"]


async def test_a_message_at_the_limit_after_normalisation_is_accepted(client, fake_engine):
    user = await add_user(client)
    message = "\ufdfa" * (4000 // 18) + "x" * (4000 % 18)  # exactly 4,000 characters once NFKC-normalised
    response = await chat(client, user_id=user["id"], message=message)
    assert response.status_code == 200, response.text


async def test_unknown_user_is_404_and_disabled_ai_is_403(client, fake_engine):
    nobody = str(uuid.uuid4())
    response = await chat(client, user_id=nobody, message="halo")
    assert response.status_code == 404 and response.json()["detail"] == f"user_id: user {nobody} not found"
    user = await add_user(client, ai=False)
    response = await chat(client, user_id=user["id"], message="halo")
    assert response.status_code == 403
    assert "ai_access_enabled" in response.json()["detail"]
    assert fake_engine.received == []
    assert await count_rows(client, "conversations") == 0


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"message": ""}, "message"),
        ({"message": "x" * 4001}, "message"),
        # 300 characters that NFKC expands 18-fold, to 5,400: the limit holds after normalisation.
        ({"message": "\ufdfa" * 300}, "message"),
        ({"message": "hi", "session_id": "bad id!"}, "session_id"),
        ({"message": "hi", "session_id": "s" * 129}, "session_id"),
        ({"message": "hi", "location": {"lat": 91, "lng": 0}}, "lat"),
        ({"message": "hi", "location": "somewhere"}, "location"),
        ({"message": "hi", "stream": "yes"}, "stream"),
        ({"message": "hi", "user_id": 0}, "user_id"),
        ({"message": "hi", "user_id": "7"}, "user_id"),  # ids are UUIDs, not row numbers
        ({"message": "hi", "user_id": None}, "user_id"),  # an API key names the user
        ({"message": "hi\x00"}, "message"),
    ],
)
async def test_bad_chat_requests_are_422(client, fake_engine, body, field):
    response = await client.post("/api/chat", json={"user_id": str(uuid.uuid4()), **body}, headers=APP)
    assert response.status_code == 422
    assert field in field_of(response)
    assert fake_engine.received == []


@pytest.mark.parametrize(
    ("mode", "status", "words"),
    [("http_400", 502, "refused"), ("http_500", 502, "engine"), ("garbage", 502, "json"), ("hang", 504, "time")],
)
async def test_engine_failures_map_to_gateway_errors_and_store_nothing(database_url, mode, status, words):
    async with running_fake_engine(mode=mode, models=["fake-qwen"]) as engine:
        settings = make_settings(database_url=database_url, vllm_base_url=engine.base_url,
                                 upstream_first_byte_timeout=0.5)
        async with running_app(settings) as client:
            user = await add_user(client)
            response = await chat(client, user_id=user["id"], message="halo", session_id="gagal")
            assert response.status_code == status, response.text
            assert words in response.json()["detail"].lower()
            assert await count_rows(client, "conversations") == 0
            assert await count_rows(client, "messages") == 0


async def test_an_unreachable_engine_is_503(database_url, fake_engine):
    settings = make_settings(database_url=database_url, vllm_base_url=fake_engine.base_url)
    async with running_app(settings) as client:
        user = await add_user(client)
        await fake_engine.stop()
        response = await chat(client, user_id=user["id"], message="halo")
        assert response.status_code == 503
        assert await count_rows(client, "messages") == 0


async def test_streamed_chat_relays_events_and_stores_the_answer(client, fake_engine, shops):
    user = await add_user(client, location={"lat": JAKARTA[0], "lng": JAKARTA[1]})
    response = await chat(client, user_id=user["id"], message="laptop gaming", stream=True, session_id="aliran")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["x-chat-session-id"] == "aliran"
    product_ids = [int(x) for x in response.headers["x-product-ids"].split(",")]
    assert product_ids == [shops["jakarta"]["id"]]
    events = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    text = "".join(
        choice["delta"].get("content") or ""
        for event in events[:-1]
        for choice in json.loads(event)["choices"]
    )
    assert text == "".join(f"t{i} " for i in range(8))
    assert fake_engine.last.json["stream"] is True
    assert products_in_prompt(fake_engine.last.json) == product_ids

    conversation = (await client.get(f"/api/conversations/{response.headers['x-conversation-id']}",
                                     headers=APP)).json()
    assert [(m["role"], m["content"]) for m in conversation["messages"]] == [
        ("user", "laptop gaming"), ("assistant", text),
    ]
    assert conversation["messages"][1]["details"]["finish_reason"] == "length"


async def test_a_broken_stream_stores_no_message(database_url):
    async with running_fake_engine(mode="break_mid_stream", models=["fake-qwen"]) as engine:
        settings = make_settings(database_url=database_url, vllm_base_url=engine.base_url)
        async with running_app(settings) as client:
            user = await add_user(client)
            response = await chat(client, user_id=user["id"], message="halo", stream=True)
            assert response.status_code == 200
            assert '"error"' in response.text
            assert await count_rows(client, "messages") == 0


@pytest.mark.parametrize("store", ["memory", "database"])
async def test_streamed_chat_through_resumable_sessions_stores_the_answer(database_url, fake_engine, store):
    if store == "database":  # the sessions' store in the marketplace's own database
        store = "postgres" if database_url.startswith("postgresql") else "sqlite"
    settings = make_settings(database_url=database_url, vllm_base_url=fake_engine.base_url, session_store=store)
    async with running_app(settings) as client:
        user = await add_user(client)
        response = await chat(client, user_id=user["id"], message="halo", stream=True)
        assert response.status_code == 200, response.text
        events = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        conversation_id = response.headers["x-conversation-id"]
        # The session's producer stores the exchange when the generation ends: poll for it.
        deadline = asyncio.get_running_loop().time() + 10
        while True:
            stored = (await client.get(f"/api/conversations/{conversation_id}", headers=APP)).json()
            if len(stored["messages"]) == 2 or asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.05)
        assert [(m["role"], m["content"]) for m in stored["messages"]] == [
            ("user", "halo"), ("assistant", "".join(f"t{i} " for i in range(8))),
        ]


async def test_the_engine_call_of_a_chat_is_in_the_usage_ledger_under_api_chat(client, fake_engine, shops):
    user = await add_user(client, location={"lat": JAKARTA[0], "lng": JAKARTA[1]})
    response = await chat(client, user_id=user["id"], message="laptop gaming budget 20 juta")
    assert response.status_code == 200, response.text
    await client.app.state.tenancy.ledger.flush()
    rows = (await client.get("/v1/usage?group_by=route", headers=APP)).json()["data"]
    (row,) = [row for row in rows if row["route"] == "/api/chat"]
    # The fake engine answers every completion with 5 prompt tokens and max_tokens (8) completion tokens.
    assert (row["requests"], row["prompt_tokens"], row["completion_tokens"]) == (1, 5, 8)


async def test_a_client_that_leaves_a_chat_cancels_its_engine_request(client, fake_engine):
    # As on /generate and /v1/chat/completions: vLLM aborts the generation instead of finishing it for
    # nobody (the non-streamed /api/chat went on waiting for the engine after its client had left).
    user = await add_user(client, location={"lat": JAKARTA[0], "lng": JAKARTA[1]})
    fake_engine.mode = "hang"
    payload = json.dumps({"user_id": user["id"], "message": "laptop gaming"}).encode()
    call = post_then_leave(client.app, "/api/chat", payload,
                           [(name.lower().encode(), value.encode()) for name, value in APP.items()])
    await until(lambda: any(r.path == "/v1/chat/completions" for r in fake_engine.received), 10.0,
                what="the chat's engine request")
    call.left.set()
    await asyncio.wait_for(fake_engine.request_aborted.wait(), 10)
    await asyncio.wait_for(call.task, 10)
    assert await count_rows(client, "messages") == 0  # nothing answered, nothing stored


async def test_a_chat_over_max_inflight_waits_its_turn_instead_of_a_429(database_url, fake_engine):
    # The marketplace names /api/chat in its ``queued_paths``: its engine call queues in flow control, so
    # the middleware must not count the route too (it refused the chat at once, 429, while the gateway's
    # one slot was taken, though its engine call would have waited its turn).
    settings = make_settings(database_url=database_url, vllm_base_url=fake_engine.base_url, max_inflight=1)
    async with running_app(settings) as client:
        user = await add_user(client, location={"lat": JAKARTA[0], "lng": JAKARTA[1]})
        fake_engine.answer_hold = asyncio.Event()
        held = asyncio.create_task(client.post("/v1/chat/completions", headers=READ, json={
            "model": "fake-qwen", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}))
        await until(lambda: len(fake_engine.received) == 1, 10.0, what="the engine holding the first request")
        asked = asyncio.create_task(chat(client, user_id=user["id"], message="laptop gaming"))
        scheduler = client.app.state.gateway.relay.flow.scheduler
        await until(lambda: scheduler.queued() == 1, 10.0, what="the chat waiting in the queue")
        fake_engine.answer_hold.set()
        first, answered = await asyncio.wait_for(asyncio.gather(held, asked), 10)
    assert first.status_code == 200, first.text
    assert answered.status_code == 200, answered.text
    assert answered.json()["answer"] == "tok " * 8
