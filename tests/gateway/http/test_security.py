"""Auth, admission control and the body-size limit, through the whole app."""

from __future__ import annotations

import asyncio
import hashlib
import hmac

import pytest

from gateway.config import Settings
from tests.support.bodies import CHAT, chat_body
from tests.support.gateway import READ_KEY, WRITE_KEY, bearer, serving
from tests.support.waiting import until


@pytest.fixture
async def secured(make_settings):
    hashed_write = "sha256:" + hashlib.sha256(WRITE_KEY.encode()).hexdigest()
    async with serving(make_settings(api_keys=[READ_KEY], admin_api_keys=[hashed_write])) as client:
        yield client


async def test_missing_or_wrong_key_is_a_401_in_openai_shape(secured, fake_engine):
    missing = await secured.post(CHAT, json=chat_body())
    wrong = await secured.post(CHAT, json=chat_body(), headers=bearer("sk-guess"))
    basic = await secured.post(CHAT, json=chat_body(), headers={"authorization": f"Basic {READ_KEY}"})
    for response in (missing, wrong, basic):
        assert response.status_code == 401
        assert response.headers["www-authenticate"] == "Bearer"
        assert response.json()["error"]["code"] == "invalid_api_key"
    assert fake_engine.received == []


async def test_plain_and_hashed_keys_both_work(secured):
    assert (await secured.post(CHAT, json=chat_body(), headers=bearer(READ_KEY))).status_code == 200
    assert (await secured.post(CHAT, json=chat_body(), headers=bearer(WRITE_KEY))).status_code == 200


async def test_health_is_public_metrics_and_models_are_not(secured):
    assert (await secured.get("/health")).status_code == 200
    assert (await secured.get("/livez")).status_code == 200
    assert (await secured.get("/metrics")).status_code == 401
    assert (await secured.get("/metrics", headers=bearer(READ_KEY))).status_code == 403  # admin or metrics keys only
    assert (await secured.get("/metrics", headers=bearer(WRITE_KEY))).status_code == 200
    assert (await secured.get("/v1/models")).status_code == 401


async def test_metrics_can_be_made_public(make_settings):
    async with serving(make_settings(api_keys=[READ_KEY], metrics_require_auth=False)) as client:
        assert (await client.get("/metrics")).status_code == 200
        assert (await client.get("/v1/models")).status_code == 401


async def test_non_openai_paths_get_detail_shape(secured):
    response = await secured.get("/model-info")
    assert response.status_code == 401
    assert "detail" in response.json()


async def test_keys_never_appear_in_metrics(make_settings):
    settings = make_settings(api_keys=[READ_KEY], admin_api_keys=[WRITE_KEY], key_id_secret="metrics-test-secret-0001")
    async with serving(settings) as client:
        await client.post(CHAT, json=chat_body(), headers=bearer(READ_KEY))
        text = (await client.get("/metrics", headers=bearer(WRITE_KEY))).text
    assert READ_KEY not in text and WRITE_KEY not in text
    expected = hmac.new(b"metrics-test-secret-0001", hashlib.sha256(READ_KEY.encode()).digest(),
                        hashlib.sha256).hexdigest()[:16]
    assert f'key_id="{expected}"' in text
    # The label is no digest prefix of the key: it cannot confirm a guessed key offline.
    assert hashlib.sha256(READ_KEY.encode()).hexdigest()[:12] not in text


async def test_per_key_in_flight_limit_is_a_429_with_retry_after(make_settings, fake_engine):
    settings = make_settings(api_keys=[READ_KEY], admin_api_keys=[WRITE_KEY], max_inflight_per_key=1,
                             flow_control=False)  # (on: it waits; tests/gateway/flow/test_one_home.py)
    async with serving(settings) as client:
        fake_engine.mode = "hang"
        first = asyncio.create_task(client.post(CHAT, json=chat_body(), headers=bearer(READ_KEY)))
        await until(lambda: len(fake_engine.received) == 1)
        refused = await client.post(CHAT, json=chat_body(), headers=bearer(READ_KEY))
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["type"] == "rate_limit_error"
        # another key has its own budget
        fake_engine.mode = "ok"
        other = await client.post(CHAT, json=chat_body(), headers=bearer(WRITE_KEY))
        assert other.status_code == 200
        first.cancel()
        await asyncio.gather(first, return_exceptions=True)


async def test_global_in_flight_limit(make_settings, fake_engine):
    async with serving(make_settings(max_inflight=1, flow_control=False)) as client:  # (on: it waits)
        fake_engine.mode = "hang"
        first = asyncio.create_task(client.post(CHAT, json=chat_body()))
        await until(lambda: len(fake_engine.received) == 1)
        assert (await client.post(CHAT, json=chat_body())).status_code == 429
        first.cancel()
        await asyncio.gather(first, return_exceptions=True)
        fake_engine.mode = "ok"
        # the slot is released when the request ends
        await until(lambda: client.app.state.gateway.admission.inflight == 0)
        assert (await client.post(CHAT, json=chat_body())).status_code == 200


async def test_body_over_the_limit_is_a_413(make_settings, fake_engine):
    async with serving(make_settings(max_body_bytes=2048)) as client:
        big = chat_body(messages=[{"role": "user", "content": "x" * 5000}])
        response = await client.post(CHAT, json=big)
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "request_too_large"

        async def chunked():
            for _ in range(10):
                yield b" " * 1000

        response = await client.post(CHAT, content=chunked(), headers={"content-type": "application/json"})
        assert response.status_code == 413
    assert fake_engine.received == []


def test_no_key_means_loopback_only():
    settings = Settings(host="0.0.0.0", api_keys=[], admin_api_keys=[])
    assert settings.host == "127.0.0.1" and settings.unsafe_host_refused == "0.0.0.0"
    settings = Settings(host="0.0.0.0", api_keys=["k"])
    assert settings.host == "0.0.0.0" and settings.unsafe_host_refused is None

