"""Each end user within the app key's limits (issue 24): who the end user is, and its share enforced.

An app key's ``limits.end_user`` apply to each end user the request names: a feature's
end-user token's user, else OpenAI's ``user`` / Anthropic's ``metadata.user_id``. The limiter
counts an end user under an opaque label, never the id itself; two replicas on one Redis
share each end user's count.
"""

from __future__ import annotations

import contextlib

import pytest

from gateway.flow.errors import QueueRefused
from gateway.http.auth import Principal
from gateway.http.errors import GatewayError
from gateway.relay.end_users import MAX_END_USER_CHARS, EndUsers, end_user_of
from gateway.tenancy.limits.resp import RedisClient
from tests.support.gateway import READ_KEY, WRITE_KEY, bearer, serving

ADMIN = bearer(WRITE_KEY)
APP = Principal(key_id="key_0123456789abcdef", role="app")
TOKEN = Principal(key_id="key_0123456789abcdef", role="user", subject="user-from-token")
CHAT = "/v1/chat/completions"
MESSAGES = "/v1/messages"


# --- who the end user is ------------------------------------------------------------------------
def test_a_tokens_user_wins_over_what_the_body_says():
    assert end_user_of(TOKEN, {"user": "someone-else"}, CHAT) == "user-from-token"
    assert end_user_of(TOKEN, None, CHAT) == "user-from-token"


def test_openai_routes_read_user_and_anthropic_reads_metadata_user_id():
    assert end_user_of(APP, {"user": "alice"}, CHAT) == "alice"
    assert end_user_of(APP, {"metadata": {"user_id": "alice"}}, CHAT) is None  # OpenAI's metadata is no end user
    assert end_user_of(APP, {"metadata": {"user_id": "bob"}}, MESSAGES) == "bob"
    assert end_user_of(APP, {"user": "bob"}, MESSAGES) is None  # not Anthropic's field
    assert end_user_of(APP, {}, CHAT) is None


@pytest.mark.parametrize("value", [None, "", 42, ["alice"], {"id": "alice"}])
def test_anything_but_a_non_empty_string_names_no_end_user(value):
    assert end_user_of(APP, {"user": value}, CHAT) is None
    assert end_user_of(APP, {"metadata": {"user_id": value}}, MESSAGES) is None


def test_an_end_user_id_longer_than_the_bound_is_a_400_naming_the_field():
    too_long = "u" * (MAX_END_USER_CHARS + 1)
    assert end_user_of(APP, {"user": "u" * MAX_END_USER_CHARS}, CHAT) == "u" * MAX_END_USER_CHARS
    with pytest.raises(GatewayError) as refused:
        end_user_of(APP, {"user": too_long}, CHAT)
    assert refused.value.status == 400 and refused.value.param == "user"
    with pytest.raises(GatewayError) as refused:
        end_user_of(APP, {"metadata": {"user_id": too_long}}, MESSAGES)
    assert refused.value.param == "metadata.user_id"


def test_the_label_is_opaque_stable_for_one_secret_and_differs_between_users():
    labels = EndUsers(b"s" * 32)
    alice = labels.label(APP, {"user": "alice@example.com"}, CHAT)
    assert len(alice) == 16 and int(alice, 16) >= 0 and "alice" not in alice
    assert EndUsers(b"s" * 32).label(APP, {"user": "alice@example.com"}, CHAT) == alice  # every replica agrees
    assert labels.label(APP, {"user": "bob@example.com"}, CHAT) != alice
    assert EndUsers(b"t" * 32).label(APP, {"user": "alice@example.com"}, CHAT) != alice  # keyed by the secret
    assert labels.label(APP, {}, CHAT) is None


# --- on the request path ------------------------------------------------------------------------
@pytest.fixture
async def gateway(make_settings):
    async with serving(make_settings(api_keys=[READ_KEY], admin_api_keys=[WRITE_KEY])) as client:
        yield client


async def new_key(gateway, limits: dict) -> str:
    answer = await gateway.post("/admin/keys", json={"name": "app", "role": "app", "limits": limits}, headers=ADMIN)
    assert answer.status_code == 201, answer.text
    return answer.json()["key"]


async def model_of(gateway) -> str:
    return (await gateway.get("/v1/models", headers=bearer(READ_KEY))).json()["data"][0]["id"]


def chat(model: str, **extra) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **extra}


def sample(gateway, name: str, **labels) -> float:
    return gateway.app.state.gateway.metrics.registry.get_sample_value(name, labels) or 0.0


async def test_one_end_user_at_its_share_is_refused_while_others_and_the_app_go_on(gateway):
    key = await new_key(gateway, {"rpm": 100, "end_user": {"rpm": 2}})
    model = await model_of(gateway)
    alice = [await gateway.post(CHAT, json=chat(model, user="alice@example.com"), headers=bearer(key))
             for _ in range(3)]
    assert [answer.status_code for answer in alice] == [200, 200, 429]
    assert alice[0].headers["x-ratelimit-limit-requests"] == "2"  # the tightest scope's figures
    assert alice[1].headers["x-ratelimit-remaining-requests"] == "0"
    refused = alice[2]
    error = refused.json()["error"]
    assert error["code"] == "rate_limit_exceeded" and error["type"] == "rate_limit_error"
    assert error["message"] == "this end user is at its limit of requests per minute"
    assert int(refused.headers["retry-after"]) >= 1
    assert refused.headers["x-ratelimit-remaining-requests"] == "0" and "x-ratelimit-reset-requests" in refused.headers
    assert "alice" not in refused.text
    bob = await gateway.post(CHAT, json=chat(model, user="bob@example.com"), headers=bearer(key))
    assert bob.status_code == 200
    for _ in range(3):  # the app's own requests (no end user) count against the key alone
        assert (await gateway.post(CHAT, json=chat(model), headers=bearer(key))).status_code == 200


async def test_anthropic_end_users_come_from_metadata_user_id(gateway):
    key = await new_key(gateway, {"end_user": {"rpm": 1}})
    model = await model_of(gateway)
    body = {"model": model, "max_tokens": 4, "stream": True, "messages": [{"role": "user", "content": "hi"}],
            "metadata": {"user_id": "u-123"}}
    first = await gateway.post(MESSAGES, json=body, headers={"x-api-key": key})
    assert first.status_code == 200, first.text
    refused = await gateway.post(MESSAGES, json=body, headers={"x-api-key": key})
    assert refused.status_code == 429
    assert refused.json()["error"] == {"type": "rate_limit_error",
                                       "message": "this end user is at its limit of requests per minute"}
    assert refused.headers["anthropic-ratelimit-requests-limit"] == "1" and "retry-after" in refused.headers
    other = {**body, "metadata": {"user_id": "u-456"}}
    assert (await gateway.post(MESSAGES, json=other, headers={"x-api-key": key})).status_code == 200


async def test_an_end_users_budget_applies_to_the_end_user_not_to_the_app(gateway):
    key = await new_key(gateway, {"end_user": {"budget_tokens": 30, "budget_period": "day"}})
    model = await model_of(gateway)
    # "hi" in one message is bounded at 34 prompt tokens: more than an end user's whole budget of 30.
    refused = await gateway.post(CHAT, json=chat(model, user="carol"), headers=bearer(key))
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "insufficient_quota", refused.text
    assert refused.json()["error"]["message"] == "this end user has used its token budget"
    assert refused.headers["x-gateway-budget-limit"] == "30"
    assert (await gateway.post(CHAT, json=chat(model), headers=bearer(key))).status_code == 200  # the app's own


async def test_an_over_long_user_is_a_400_only_where_end_users_are_limited(gateway):
    model = await model_of(gateway)
    limited = await new_key(gateway, {"end_user": {"rpm": 5}})
    refused = await gateway.post(CHAT, json=chat(model, user="x" * 300), headers=bearer(limited))
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "user"
    plain = await new_key(gateway, {"rpm": 5})
    assert (await gateway.post(CHAT, json=chat(model, user="x" * 300), headers=bearer(plain))).status_code == 200


async def test_end_user_limits_are_validated_naming_the_field(gateway):
    for limits, field in (({"end_user": {"rpm": 0}}, "rpm"), ({"end_user": {"budget_tokens": 5}}, "budget_period"),
                          ({"end_user": {"burst": 5}}, "burst")):
        answer = await gateway.post("/admin/keys", json={"name": "a", "limits": limits}, headers=ADMIN)
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["param"].startswith("limits.end_user") and field in answer.text
    created = (await gateway.post("/admin/keys", json={"name": "a", "role": "app"}, headers=ADMIN)).json()
    patched = await gateway.patch(f"/admin/keys/{created['id']}", json={"limits": {"end_user": {"tpm": 1000}}},
                                  headers=ADMIN)
    assert patched.status_code == 200 and patched.json()["limits"]["end_user"]["tpm"] == 1000
    bad = await gateway.patch(f"/admin/keys/{created['id']}", json={"limits": {"end_user": {"tpm": -1}}},
                              headers=ADMIN)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "limits.end_user.tpm"


# --- refusals are counted as refusals, not upstream errors -----------------------------------------
async def test_a_limit_refusal_at_stream_start_is_a_refusal_not_an_upstream_error(gateway):
    key = await new_key(gateway, {"rpm": 1, "end_user": {"rpm": 1}})
    model = await model_of(gateway)
    assert (await gateway.post(CHAT, json=chat(model, stream=True), headers=bearer(key))).status_code == 200
    refused = await gateway.post(CHAT, json=chat(model, stream=True), headers=bearer(key))
    assert refused.status_code == 429
    unary = await gateway.post(CHAT, json=chat(model), headers=bearer(key))
    assert unary.status_code == 429
    assert sample(gateway, "gateway_rejected_total", reason="rate_limit") == 2
    assert sample(gateway, "gateway_upstream_errors_total", kind="rate_limit_exceeded") == 0


# --- two replicas on one Redis ---------------------------------------------------------------------
@pytest.mark.integration
@pytest.mark.redis
async def test_two_replicas_share_each_end_users_count_in_redis_under_a_label(make_settings, redis_url):
    settings = make_settings(api_keys=[READ_KEY], admin_api_keys=[WRITE_KEY], redis_url=redis_url)
    async with contextlib.AsyncExitStack() as stack:
        a = await stack.enter_async_context(serving(settings))
        b = await stack.enter_async_context(serving(settings))  # the same database, key-id secret and Redis
        assert a.app is not b.app
        key = await new_key(a, {"end_user": {"rpm": 3}})
        model = await model_of(a)
        statuses = []
        for replica in (a, b, a, b, b):
            answer = await replica.post(CHAT, json=chat(model, user="erin@example.com"), headers=bearer(key))
            statuses.append(answer.status_code)
        assert statuses == [200, 200, 200, 429, 429]
        for replica in (a, b):  # another end user of the same key is untouched on either replica
            assert (await replica.post(CHAT, json=chat(model, user="frank@example.com"),
                                       headers=bearer(key))).status_code == 200
    client = RedisClient(redis_url)
    try:
        names = [name.decode() for name in await client.call(b"KEYS", b"*")]
    finally:
        await client.close()
    users = [name for name in names if ":user:" in name]
    assert users and not any("erin" in name or "frank" in name for name in names)


@pytest.mark.parametrize(("reason", "own_limit", "status"), [("key_queue_full", True, 429), ("queue_full", False, 503)])
async def test_a_queue_refusal_is_a_refusal_not_an_upstream_error(gateway, monkeypatch, reason, own_limit, status):
    flow = gateway.app.state.gateway.relay.flow

    async def refuse(demand):  # the queue's answer when it is full (gateway.flow.scheduler)
        raise QueueRefused(reason, "the queue is full", own_limit=own_limit, retry_after=3)

    monkeypatch.setattr(flow, "acquire", refuse)
    model = await model_of(gateway)
    for stream in (True, False):
        refused = await gateway.post(CHAT, json=chat(model, stream=stream), headers=bearer(READ_KEY))
        assert refused.status_code == status and refused.json()["error"]["code"] == reason
    assert sample(gateway, "gateway_rejected_total", reason=reason) == 2
    assert sample(gateway, "gateway_upstream_errors_total", kind=reason) == 0


def test_only_the_gateways_own_refusals_are_refusals():
    from gateway.engines.errors import EngineHTTPError, EngineUnavailable
    from gateway.failures import LimitReached, Unavailable
    from gateway.http.queueing import refusal_error
    from gateway.relay.refusals import refusal_reason

    assert refusal_reason(refusal_error(QueueRefused("timeout", "waited", own_limit=True, retry_after=1))) \
        == "queue_timeout"
    assert refusal_reason(LimitReached("x", code="rate_limit_exceeded")) == "rate_limit"
    assert refusal_reason(LimitReached("x", code="insufficient_quota")) == "budget"
    assert refusal_reason(Unavailable("x", code="limits_unavailable")) == "limits_unavailable"
    assert refusal_reason(EngineUnavailable()) is None
    assert refusal_reason(EngineHTTPError(429, "engine busy", b"{}")) is None  # the engine's 429 is upstream
    assert refusal_reason(GatewayError(503, "x", code="queue_full")) is None  # only the queue's own refusal
