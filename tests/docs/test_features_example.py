"""docs/features.md's example feature, run as written: plugged in, configured, serving and streaming.

The class is taken from the page itself and handed to ``create_app`` as an installed entry
point would be, in front of the fake engine (which answers ``t0 t1 ...`` when streaming).
"""

from __future__ import annotations

import hashlib

import pytest

from gateway.app import create_app
from gateway.http.key_ids import key_id as hmac_key_id
from gateway.http.key_ids import secret_from_settings
from tests.support.docs import code_blocks, read_doc
from tests.support.fake_engine import settings_for
from tests.support.gateway import READ_KEY, bearer, serving

[EXAMPLE] = code_blocks(read_doc("features.md"), "## A whole feature", "python")


@pytest.fixture
def greeter() -> type:
    namespace: dict = {}
    exec(compile(EXAMPLE, "<docs/features.md example>", "exec"), namespace)
    return namespace["GreeterFeature"]


METRICS_KEY = "sk-test-metrics-1357924680"


@pytest.fixture
def settings(fake_engine, tmp_path):
    return settings_for(fake_engine, database_url=f"sqlite+aiosqlite:///{tmp_path}/gateway.db", api_keys=[READ_KEY],
                        metrics_api_keys=[METRICS_KEY])


async def test_the_feature_serves_its_route_behind_the_gateway_auth_with_its_own_settings(
        greeter, settings, monkeypatch):
    monkeypatch.setenv("GREETER_GREETING", "selamat pagi")
    async with serving(settings, features={"greeter": greeter}) as client:
        refused = await client.get("/api/greeter")
        answer = await client.get("/api/greeter", headers=bearer(READ_KEY))
        status = client.app.state.greeter.status()
    assert refused.status_code == 401 and "detail" in refused.json()
    assert answer.status_code == 200
    assert answer.json() == {"greeting": "selamat pagi", "model": "fake-model"}
    assert status == {"ready": True}


async def test_the_feature_streams_a_chat_completion_through_the_gateway(greeter, settings, fake_engine):
    async with serving(settings, features={"greeter": greeter}) as client:
        response = await client.post("/api/greeter/poem", headers=bearer(READ_KEY))
        metrics = (await client.get("/metrics", headers=bearer(METRICS_KEY))).text
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["x-session-id"]  # sessions are on by default: the stream is resumable
    data = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]" and sum('"content":"t' in d for d in data) == 16
    sent = fake_engine.last.json
    assert sent["model"] == "fake-model" and sent["messages"][0]["content"] == "A poem that begins: hello"
    key_id = hmac_key_id(hashlib.sha256(READ_KEY.encode()).digest(), secret_from_settings(settings))
    assert f'gateway_tokens_total{{key_id="{key_id}",kind="completion"}} 16.0' in metrics


async def test_features_none_leaves_it_out(greeter, settings):
    async with serving(settings.model_copy(update={"features": ["none"]}), features={"greeter": greeter}) as client:
        assert (await client.get("/api/greeter", headers=bearer(READ_KEY))).status_code == 404


def test_a_feature_name_no_installed_package_provides_is_refused(settings):
    with pytest.raises(ValueError, match="FEATURES names greeter"):
        create_app(settings.model_copy(update={"features": ["greeter"]}), features={})
