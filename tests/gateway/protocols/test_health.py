"""/health and /readyz: public, but only the status for callers without a key; the details for callers with one."""

from __future__ import annotations

import pytest

from tests.support.gateway import READ_KEY, WRITE_KEY, bearer, serving
from tests.support.servers import free_port

KEYS = dict(api_keys=[READ_KEY], admin_api_keys=[WRITE_KEY])


async def test_without_a_key_health_and_readyz_say_only_how_things_stand(make_settings, fake_engine):
    async with serving(make_settings(**KEYS)) as client:
        health = await client.get("/health")
        wrong_key = await client.get("/health", headers=bearer("sk-guess"))
        ready = await client.get("/readyz")
    assert health.status_code == 200 and wrong_key.status_code == 200  # public: a wrong key is no 401 either
    assert health.json() == wrong_key.json() == {"status": "healthy", "model_loaded": True, "ready": True}
    assert ready.status_code == 200 and ready.json() == {"status": "ok"}
    assert "fake-model" not in health.text + ready.text and fake_engine.base_url not in health.text + ready.text


@pytest.mark.parametrize("headers", [bearer(READ_KEY), bearer(WRITE_KEY), {"x-api-key": READ_KEY}],
                         ids=["read key", "admin key", "x-api-key"])
async def test_any_valid_key_gets_the_details(make_settings, fake_engine, headers):
    async with serving(make_settings(**KEYS)) as client:
        health = (await client.get("/health", headers=headers)).json()
        ready = await client.get("/readyz", headers=headers)
    assert health["status"] == "healthy" and health["model_loaded"] is True and health["model_path"] == "fake-model"
    assert health["engine"]["models"] == ["fake-model", "stack-2.9"]  # with the default alias
    assert [engine["url"] for engine in health["engines"]] == [fake_engine.base_url]
    assert ready.status_code == 200 and ready.json()["engines"] == health["engines"]
    assert ready.json()["status"] == "ok" and ready.json()["ready"] is True


async def test_an_engine_that_is_down_shows_no_error_text_without_a_key(make_settings):
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    async with serving(make_settings(vllm_base_url=dead, **KEYS)) as client:
        health = await client.get("/health")
        ready = await client.get("/readyz")
        detailed = await client.get("/readyz", headers=bearer(READ_KEY))
    assert health.status_code == 200 and health.json() == {"status": "healthy", "model_loaded": False, "ready": False}
    assert ready.status_code == 503 and ready.json() == {"status": "unavailable"}
    # With a key: the same status, and why.
    assert detailed.status_code == 503 and detailed.json()["status"] == "unavailable"  # never "healthy" with a 503
    assert detailed.json()["engine"]["error"] and detailed.json()["engines"][0]["last_error"] == "refused"
    assert dead not in health.text + ready.text


async def test_a_gateway_without_keys_serves_loopback_only_and_shows_everything(make_settings, fake_engine):
    async with serving(make_settings()) as client:
        health = (await client.get("/health")).json()
        ready = (await client.get("/readyz")).json()
    assert health["model_path"] == "fake-model" and health["engines"][0]["url"] == fake_engine.base_url
    assert ready["model_path"] == "fake-model"
