"""A key authenticates as ``Authorization: Bearer`` or as ``x-api-key``; refusals come in the route's shape."""

from __future__ import annotations

import orjson
import pytest

from tests.support.gateway import serving

KEY = "sk-header-test-0123456789"
OTHER = "sk-header-test-other-0000"
CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


@pytest.fixture
async def client(make_settings):
    async with serving(make_settings(api_keys=[KEY, OTHER])) as client:
        yield client


@pytest.mark.parametrize("sent", [
    {"authorization": f"Bearer {KEY}"},
    {"x-api-key": KEY},
    {"x-api-key": f"  {KEY} "},
    {"authorization": "Bearer sk-not-a-key", "x-api-key": KEY},   # either one that is a key will do
    {"authorization": f"Bearer {KEY}", "x-api-key": "sk-not-a-key"},
])
async def test_either_header_authenticates(client, sent):
    answer = await client.post("/v1/chat/completions", json=CHAT, headers=sent)
    assert answer.status_code == 200, answer.text


async def test_both_headers_with_two_keys_take_the_bearer_one(client, fake_engine):
    answer = await client.post("/v1/chat/completions", json=CHAT,
                               headers={"authorization": f"Bearer {KEY}", "x-api-key": OTHER})
    assert answer.status_code == 200


@pytest.mark.parametrize(("sent", "message"), [
    ({}, "missing API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'"),
    ({"x-api-key": ""}, "missing API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'"),
    ({"x-api-key": "sk-wrong"}, "invalid API key"),
    ({"authorization": "Basic abc"}, "missing API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'"),
])
async def test_refusals_say_which_headers_work(client, sent, message):
    answer = await client.post("/v1/chat/completions", json=CHAT, headers=sent)
    assert answer.status_code == 401 and answer.json()["error"]["message"] == message
    assert answer.headers["www-authenticate"] == "Bearer"


async def test_refusals_on_the_messages_routes_are_in_anthropics_envelope(client):
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        answer = await client.post(path, json={}, headers={"x-api-key": "sk-wrong"})
        assert answer.status_code == 401
        assert orjson.loads(answer.content) == {"type": "error", "error": {"type": "authentication_error",
                                                                         "message": "invalid API key"}}


async def test_oversized_bodies_on_the_messages_routes_are_anthropics_request_too_large(make_settings):
    async with serving(make_settings(api_keys=[KEY], max_body_bytes=1024)) as client:
        answer = await client.post("/v1/messages", content=b"x" * 2048, headers={"x-api-key": KEY})
    assert answer.status_code == 413 and answer.json()["error"]["type"] == "request_too_large"
