"""The gateway's own refusals are counted as refusals, never as the engine's failures.

A request the gateway answers with a 4xx of its own as a stream or call starts (a key's models
list, a bad priority band, an end user's id too long, a limit) or a stream it cuts when a
budget runs out is in ``gateway_rejected_total{reason}``; ``gateway_upstream_errors_total``
keeps what the engine did (tests/gateway/tenancy/test_end_users.py covers the limits' and the
queue's 429s).
"""

from __future__ import annotations

import pytest

from gateway.engines.errors import EngineHTTPError, EngineUnavailable
from gateway.failures import Invalid
from gateway.http.errors import GatewayError
from gateway.relay.refusals import reached_engine, refusal_reason
from tests.support.bodies import chat_body, stream_body
from tests.support.gateway import READ_KEY, WRITE_KEY, bearer, serving

CHAT = "/v1/chat/completions"
ADMIN = bearer(WRITE_KEY)


@pytest.fixture
async def gateway(make_settings):
    async with serving(make_settings(api_keys=[READ_KEY], admin_api_keys=[WRITE_KEY])) as client:
        yield client


async def new_key(gateway, **body) -> str:
    answer = await gateway.post("/admin/keys", json={"name": "app", "role": "app", **body}, headers=ADMIN)
    assert answer.status_code == 201, answer.text
    return answer.json()["key"]


def sample(gateway, name: str, **labels) -> float:
    return gateway.app.state.gateway.metrics.registry.get_sample_value(name, labels) or 0.0


def upstream_errors(gateway) -> float:
    registry = gateway.app.state.gateway.metrics.registry
    return sum(sample.value for metric in registry.collect() if metric.name == "gateway_upstream_errors"
               for sample in metric.samples if sample.name == "gateway_upstream_errors_total")


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "unary"])
async def test_the_gateways_own_4xx_at_the_start_are_refusals(gateway, stream):
    body = stream_body if stream else chat_body
    limited = await new_key(gateway, models=["another-model"], limits={"end_user": {"rpm": 5}})
    shared = await new_key(gateway, limits={"end_user": {"rpm": 5}})
    not_allowed = await gateway.post(CHAT, json=body(), headers=bearer(limited))
    bad_band = await gateway.post(CHAT, json=body(), headers={**bearer(READ_KEY), "x-priority": "urgent-please"})
    long_user = await gateway.post(CHAT, json=body(user="u" * 300), headers=bearer(shared))
    assert (not_allowed.status_code, not_allowed.json()["error"]["code"]) == (403, "model_not_allowed")
    assert (bad_band.status_code, bad_band.json()["error"]["code"]) == (400, "invalid_priority")
    assert (long_user.status_code, long_user.json()["error"]["param"]) == (400, "user")
    for reason in ("model_not_allowed", "invalid_priority", "invalid_value"):
        assert sample(gateway, "gateway_rejected_total", reason=reason) == 1, reason
    assert upstream_errors(gateway) == 0


async def test_a_stream_cut_at_its_budget_is_a_refusal_not_a_broken_stream(gateway):
    key = await new_key(gateway, limits={"budget_tokens": 80, "budget_period": "total"})
    answer = await gateway.post(CHAT, json=stream_body(max_tokens=200), headers=bearer(key))
    assert answer.status_code == 200 and b"insufficient_quota" in answer.content  # cut with its error event
    assert sample(gateway, "gateway_rejected_total", reason="budget") == 1
    assert upstream_errors(gateway) == 0


async def test_the_engines_own_errors_stay_upstream_errors(gateway, fake_engine):
    fake_engine.mode = "http_500"
    failed = await gateway.post(CHAT, json=stream_body(), headers=bearer(READ_KEY))
    assert failed.status_code == 502  # (an engine 5xx is a 502 to the client)
    assert upstream_errors(gateway) == 1
    assert sample(gateway, "gateway_rejected_total", reason="http_500") == 0


def test_which_failures_are_the_gateways_and_which_reached_an_engine():
    assert refusal_reason(GatewayError(403, "x", code="model_not_allowed")) == "model_not_allowed"
    assert refusal_reason(GatewayError(400, "x")) == "http_400"
    assert refusal_reason(Invalid("x")) == "invalid"
    assert refusal_reason(GatewayError(503, "x", code="draining")) is None  # the gateway's 5xx is no refusal
    assert refusal_reason(EngineHTTPError(400, "the engine's own 400", b"{}")) is None
    assert refusal_reason(None) is None
    assert not reached_engine(GatewayError(429, "x", code="queue_timeout"))
    assert not reached_engine(EngineUnavailable())  # (connection refused: nothing was sent)
    assert not reached_engine(EngineUnavailable(kind="no_engine"))
    assert reached_engine(EngineUnavailable(kind="reset"))  # it may have been received
    assert reached_engine(EngineHTTPError(400, "the engine's own 400", b"{}"))
    assert reached_engine(None)
