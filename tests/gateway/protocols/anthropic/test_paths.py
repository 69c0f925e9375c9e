"""Anthropic's path family answers in Anthropic's envelope; a doubled /v1 says how to fix the base URL; / answers."""

from __future__ import annotations

import anthropic
import httpx
import pytest

from gateway.config import Settings
from tests.support.gateway import READ_KEY, running_gateway, serving
from tests.support.recorded_engine import recorded_engine


def settings(engine) -> Settings:
    return Settings(vllm_base_url=engine.base_url, api_keys=[READ_KEY], access_log=False, engine_poll_interval=60,
                    session_store="off")


@pytest.mark.parametrize("path", ["/v1/messages/no-such-route", "/v1/messages/count_tokens/x", "/v1/v1/messages",
                                  "/v1/v1/messages/count_tokens"])
async def test_errors_under_the_messages_family_are_in_anthropics_envelope(path):
    async with recorded_engine() as engine, serving(settings(engine)) as client:
        response = await client.post(path, json={}, headers={"x-api-key": READ_KEY})
        unauthenticated = await client.post(path, json={})
    assert response.status_code == 404 and response.json()["type"] == "error"
    assert response.json()["error"]["type"] == "not_found_error"
    assert unauthenticated.status_code == 401 and unauthenticated.json()["error"]["type"] == "authentication_error"


async def test_a_bad_message_batch_is_refused_in_anthropics_envelope():
    async with recorded_engine() as engine, serving(settings(engine)) as client:
        response = await client.post("/v1/messages/batches", json={}, headers={"x-api-key": READ_KEY})
    assert response.status_code == 400 and response.json()["type"] == "error"
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert "requests" in response.json()["error"]["message"]


async def test_a_base_url_ending_in_v1_gets_a_404_that_says_to_drop_it():
    async with recorded_engine() as engine, running_gateway(settings(engine)) as (url, _):
        client = anthropic.AsyncAnthropic(base_url=url + "/v1", api_key=READ_KEY, max_retries=0)
        with pytest.raises(anthropic.NotFoundError) as refused:
            await client.messages.create(model="fake-model", max_tokens=8, messages=[{"role": "user", "content": "x"}])
    assert "without /v1" in refused.value.message and "/v1/v1/messages" in refused.value.message
    assert engine.requests == []


async def test_openai_paths_keep_openais_envelope():
    async with recorded_engine() as engine, serving(settings(engine)) as client:
        response = await client.post("/v1/nothing-here", json={}, headers={"x-api-key": READ_KEY})
    assert response.status_code == 404 and set(response.json()["error"]) == {"message", "type", "param", "code"}


@pytest.mark.parametrize("method", ["GET", "HEAD"])
async def test_the_root_answers_without_a_key_and_names_no_model(method):
    async with recorded_engine() as engine, running_gateway(settings(engine)) as (url, _), \
            httpx.AsyncClient() as client:
        response = await client.request(method, url + "/")
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    if method == "GET":
        assert response.json()["name"] == "stack-gateway" and "fake-model" not in response.text
    else:
        assert response.content == b""
