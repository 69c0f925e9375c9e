"""Limits and the ledger on the request path, through the whole app in front of the fake engine.

A database key's rpm, budget, concurrency and models list are enforced on every inference
route (refusals in the route's own shape, with Retry-After and the family's rate-limit
headers); a stream that spends its budget is cut with its protocol's error event; every
route's usage reaches the ledger (``/v1/usage``) as the client received it.
"""

from __future__ import annotations

import asyncio

import orjson
import pytest

from gateway.relay.metering import _output_capped
from gateway.tenancy.limits.estimate import estimate
from tests.support.gateway import READ_KEY, WRITE_KEY, bearer, serving

ADMIN = bearer(WRITE_KEY)


@pytest.fixture
async def gateway(make_settings):
    async with serving(make_settings(api_keys=[READ_KEY], admin_api_keys=[WRITE_KEY],
                                     usage_flush_seconds=300)) as client:
        yield client


async def new_key(gateway, **body) -> str:
    answer = await gateway.post("/admin/keys", json={"name": "app", **body}, headers=ADMIN)
    assert answer.status_code == 201, answer.text
    return answer.json()["key"]


async def model_of(gateway) -> str:
    return (await gateway.get("/v1/models", headers=bearer(READ_KEY))).json()["data"][0]["id"]


def chat(model: str, **extra) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **extra}


def events(body: bytes) -> list[bytes]:
    return [event for event in body.split(b"\n\n") if event.strip()]


async def flushed_usage(gateway, key: str, group_by: str = "route") -> list[dict]:
    await gateway.app.state.tenancy.ledger.flush()
    answer = await gateway.get(f"/v1/usage?group_by={group_by}", headers=bearer(key))
    assert answer.status_code == 200, answer.text
    return answer.json()["data"]


async def test_rpm_admits_the_limit_then_refuses_with_retry_after_and_openai_headers(gateway):
    key = await new_key(gateway, limits={"rpm": 3})
    model = await model_of(gateway)
    answers = [await gateway.post("/v1/chat/completions", json=chat(model), headers=bearer(key)) for _ in range(4)]
    assert [answer.status_code for answer in answers] == [200, 200, 200, 429]
    first, refused = answers[0], answers[3]
    assert (first.headers["x-ratelimit-limit-requests"], first.headers["x-ratelimit-remaining-requests"]) == ("3", "2")
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert refused.json()["error"]["type"] == "rate_limit_error"
    assert int(refused.headers["retry-after"]) >= 1
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert "x-ratelimit-reset-requests" in refused.headers
    # A configured key without limits is never refused.
    assert (await gateway.post("/v1/chat/completions", json=chat(model), headers=bearer(READ_KEY))).status_code == 200


async def test_anthropic_refusals_use_its_envelope_and_headers_and_x_api_key_carries_a_database_key(gateway):
    key = await new_key(gateway, limits={"rpm": 1})
    model = await model_of(gateway)
    body = {"model": model, "max_tokens": 4, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    first = await gateway.post("/v1/messages", json=body, headers={"x-api-key": key})
    assert first.status_code == 200, first.text
    assert first.headers["anthropic-ratelimit-requests-limit"] == "1"
    assert first.headers["anthropic-ratelimit-requests-remaining"] == "0"
    refused = await gateway.post("/v1/messages", json=body, headers={"x-api-key": key})
    assert refused.status_code == 429
    assert refused.json()["type"] == "error" and refused.json()["error"]["type"] == "rate_limit_error"
    assert "anthropic-ratelimit-requests-reset" in refused.headers and "retry-after" in refused.headers
    assert "x-ratelimit-limit-requests" not in refused.headers


async def test_a_stream_that_spends_its_budget_is_cut_with_an_error_event_and_the_next_request_refused(gateway):
    key = await new_key(gateway, limits={"budget_tokens": 80, "budget_period": "total"})
    model = await model_of(gateway)
    answer = await gateway.post("/v1/chat/completions", json=chat(model, max_tokens=200, stream=True),
                                headers=bearer(key))
    assert answer.status_code == 200
    stream = events(answer.content)
    assert stream[-1] == b"data: [DONE]"
    error = orjson.loads(stream[-2].removeprefix(b"data: "))["error"]
    assert error["code"] == "insufficient_quota" and "budget" in error["message"]
    assert error["type"] == "insufficient_quota"  # (OpenAI's type for a spent quota)
    content = [event for event in stream if b'"content":"t' in event]
    assert 0 < len(content) < 200  # cut, not finished: the engine would have sent 200
    refused = await gateway.post("/v1/chat/completions", json=chat(model), headers=bearer(key))
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "insufficient_quota"
    assert refused.json()["error"]["type"] == "insufficient_quota"
    assert "retry-after" not in refused.headers  # a spent total budget never comes back by itself
    assert refused.headers["x-gateway-budget-limit"] == "80"


async def test_a_non_streamed_request_granted_less_than_asked_gets_a_lowered_output_limit(gateway, fake_engine):
    key = await new_key(gateway, limits={"budget_tokens": 100, "budget_period": "day"})
    model = await model_of(gateway)
    answer = await gateway.post("/v1/chat/completions", json=chat(model, max_tokens=500), headers=bearer(key))
    assert answer.status_code == 200
    sent = orjson.loads(fake_engine.last.body)["max_tokens"]
    # The prompt bound of "hi" in one message is 2 + 16 + 8 * 2 = 34: 66 tokens left of 100.
    assert sent == 66


@pytest.fixture
async def flow_off(make_settings):
    """The gateway with FLOW_CONTROL=false: the limiter counts max_concurrency (on, the queue does)."""
    async with serving(make_settings(api_keys=[READ_KEY], admin_api_keys=[WRITE_KEY], usage_flush_seconds=300,
                                     flow_control=False)) as client:
        yield client


async def test_max_concurrency_refuses_a_second_stream_while_the_first_is_in_flight(flow_off, fake_engine):
    """With flow control off; on, the second waits (tests/gateway/flow/test_one_home.py)."""
    gateway = flow_off
    key = await new_key(gateway, limits={"max_concurrency": 1})
    model = await model_of(gateway)
    fake_engine.hold = asyncio.Event()
    first = asyncio.create_task(gateway.post("/v1/chat/completions", json=chat(model, stream=True),
                                             headers=bearer(key)))
    try:
        async with asyncio.timeout(10):
            while fake_engine.streams_active < 1:
                await asyncio.sleep(0.01)
        second = await gateway.post("/v1/chat/completions", json=chat(model), headers=bearer(key))
        assert second.status_code == 429 and "in flight" in second.json()["error"]["message"]
    finally:
        fake_engine.hold.set()
    assert (await first).status_code == 200
    again = await gateway.post("/v1/chat/completions", json=chat(model), headers=bearer(key))
    assert again.status_code == 200  # the slot came back when the stream ended


@pytest.mark.integration
@pytest.mark.redis
async def test_with_redis_max_concurrency_holds_across_replicas_flow_control_on(make_settings, redis_url,
                                                                                 fake_engine):
    """Flow control on (the default) and REDIS_URL: the limiter keeps counting max_concurrency for
    the whole fleet, so a second stream on another replica is refused while the first is in flight
    (a per-replica queue could not see the first)."""
    settings = make_settings(api_keys=[READ_KEY], admin_api_keys=[WRITE_KEY], usage_flush_seconds=300,
                             redis_url=redis_url)
    assert settings.flow_control
    async with serving(settings) as a, serving(settings) as b:  # the same database, key-id secret and Redis
        key = await new_key(a, limits={"max_concurrency": 1})
        model = await model_of(a)
        fake_engine.hold = asyncio.Event()
        first = asyncio.create_task(a.post("/v1/chat/completions", json=chat(model, stream=True),
                                           headers=bearer(key)))
        try:
            async with asyncio.timeout(10):
                while fake_engine.streams_active < 1:
                    await asyncio.sleep(0.01)
            second = await b.post("/v1/chat/completions", json=chat(model), headers=bearer(key))
            assert second.status_code == 429 and "in flight" in second.json()["error"]["message"]
        finally:
            fake_engine.hold.set()
        assert (await first).status_code == 200
        assert (await b.post("/v1/chat/completions", json=chat(model), headers=bearer(key))).status_code == 200


async def test_a_keys_models_list_is_enforced_and_filters_v1_models(gateway):
    model = await model_of(gateway)
    key = await new_key(gateway, models=["some-other-model"])
    refused = await gateway.post("/v1/chat/completions", json=chat(model), headers=bearer(key))
    assert refused.status_code == 403
    assert model in refused.json()["error"]["message"] and refused.json()["error"]["param"] == "model"
    assert (await gateway.get("/v1/models", headers=bearer(key))).json()["data"] == []
    allowed = await new_key(gateway, models=[model])
    assert (await gateway.post("/v1/chat/completions", json=chat(model), headers=bearer(allowed))).status_code == 200
    assert [card["id"] for card in (await gateway.get("/v1/models", headers=bearer(allowed))).json()["data"]] \
        == [model]


async def test_a_keys_models_list_holds_for_a_body_that_names_no_model_and_for_an_audio_upload(gateway, fake_engine):
    """A body without ``model`` goes to the engine's default model, and an audio upload names its model in
    a form field: both were let through a key whose list does not have that model (only a JSON body's
    ``model`` was checked)."""
    model = await model_of(gateway)
    key = await new_key(gateway, models=["some-other-model"])
    no_model = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    for path, body in [("/v1/chat/completions", no_model), ("/v1/chat/completions", {**no_model, "stream": True}),
                       ("/v1/completions", {"prompt": "hi", "max_tokens": 4}),
                       ("/v1/responses", {"input": "hi", "max_output_tokens": 4, "stream": True})]:
        refused = await gateway.post(path, json=body, headers=bearer(key))
        assert refused.status_code == 403, (path, body, refused.text)
        assert refused.json()["error"]["code"] == "model_not_allowed" and model in refused.json()["error"]["message"]
    files = {"file": ("a.wav", b"RIFF\x00\x00\x00\x00WAVE", "audio/wav")}
    received = len(fake_engine.received)
    audio = await gateway.post("/v1/audio/transcriptions", data={"model": model}, files=files, headers=bearer(key))
    assert audio.status_code == 403 and audio.json()["error"]["code"] == "model_not_allowed", audio.text
    assert len(fake_engine.received) == received  # refused before any engine was asked
    # A key that may use the default model still may when its body names none (an alias in its list too).
    for allowed in (model, "stack-2.9"):
        may = await new_key(gateway, models=[allowed])
        assert (await gateway.post("/v1/chat/completions", json=no_model, headers=bearer(may))).status_code == 200
        answer = await gateway.post("/v1/audio/transcriptions", data={"model": model}, files=files, headers=bearer(may))
        assert answer.status_code == 200, answer.text


async def test_a_keys_models_list_holds_for_a_background_response_that_names_no_model(make_settings, fake_engine):
    async with serving(make_settings(api_keys=[READ_KEY], admin_api_keys=[WRITE_KEY], usage_flush_seconds=300,
                                     session_store="memory")) as gateway:
        model = await model_of(gateway)
        body = {"input": "hi", "max_output_tokens": 4, "background": True}
        refused = await gateway.post("/v1/responses", json=body,
                                     headers=bearer(await new_key(gateway, models=["some-other-model"])))
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "model_not_allowed", refused.text
        allowed = await gateway.post("/v1/responses", json=body, headers=bearer(await new_key(gateway, models=[model])))
        assert allowed.status_code == 200 and allowed.json()["status"] == "queued", allowed.text


async def test_a_revoked_rotated_out_or_unknown_database_key_is_refused_as_an_api_key(gateway):
    """Its 401 said 'invalid, expired or revoked end-user token', the marketplace tokens' words."""
    created = (await gateway.post("/admin/keys", json={"name": "app"}, headers=ADMIN)).json()
    rotated = await gateway.post(f"/admin/keys/{created['id']}/rotate", json={"grace_seconds": 0}, headers=ADMIN)
    revoked = (await gateway.post("/admin/keys", json={"name": "gone"}, headers=ADMIN)).json()
    assert (await gateway.delete(f"/admin/keys/{revoked['id']}", headers=ADMIN)).status_code == 200
    for secret in (created["key"], revoked["key"], rotated.json()["key"][:-4] + "AAAA"):
        for headers in (bearer(secret), {"x-api-key": secret}):
            refused = await gateway.get("/v1/models", headers=headers)
            assert refused.status_code == 401
            assert refused.json()["error"] == {"message": "invalid, expired or revoked API key",
                                               "type": "authentication_error", "param": None,
                                               "code": "invalid_api_key"}


async def test_the_ledger_gets_what_clients_received_from_every_route(gateway):
    key = await new_key(gateway)
    model = await model_of(gateway)
    unary = (await gateway.post("/v1/chat/completions", json=chat(model, max_tokens=7), headers=bearer(key))).json()
    streamed = await gateway.post("/v1/chat/completions", headers=bearer(key), json=chat(
        model, max_tokens=5, stream=True, stream_options={"include_usage": True}))
    stream_usage = orjson.loads(events(streamed.content)[-2].removeprefix(b"data: "))["usage"]
    completion = (await gateway.post("/v1/completions", json={"model": model, "prompt": "x", "max_tokens": 3},
                                     headers=bearer(key))).json()
    rows = {row["route"]: row for row in await flushed_usage(gateway, key)}
    chat_row = rows["/v1/chat/completions"]
    assert chat_row["requests"] == 2
    assert chat_row["completion_tokens"] == unary["usage"]["completion_tokens"] + stream_usage["completion_tokens"]
    assert chat_row["prompt_tokens"] == unary["usage"]["prompt_tokens"] + stream_usage["prompt_tokens"]
    assert rows["/v1/completions"]["completion_tokens"] == completion["usage"]["completion_tokens"]
    by_model = await flushed_usage(gateway, key, group_by="model")
    assert [row["model"] for row in by_model] == [model]


async def test_the_code_api_is_limited_and_recorded_too(gateway):
    key = await new_key(gateway, limits={"rpm": 1})
    first = await gateway.post("/generate", json={"prompt": "def f():", "max_tokens": 4}, headers=bearer(key))
    assert first.status_code == 200, first.text
    refused = await gateway.post("/generate", json={"prompt": "def f():", "max_tokens": 4}, headers=bearer(key))
    assert refused.status_code == 429 and "retry-after" in refused.headers
    rows = {row["route"]: row for row in await flushed_usage(gateway, key)}
    assert rows["/generate"]["requests"] == 1 and rows["/generate"]["completion_tokens"] == first.json()["num_tokens"]


async def test_a_stream_its_reservation_covers_is_not_cut_by_its_framing_events(gateway, fake_engine):
    # A budget of exactly the prompt bound ("hi" in one message: 34) and max_tokens: the engine cannot
    # generate more, so the stream's events beyond its tokens (the role's, the finish's, the usage's,
    # [DONE]) must not be taken for tokens the budget lacks (they were, and cut the stream's end).
    key = await new_key(gateway, limits={"budget_tokens": 34 + 4, "budget_period": "total"})
    model = await model_of(gateway)
    answer = await gateway.post("/v1/chat/completions",
                                json=chat(model, max_tokens=4, stream=True, stream_options={"include_usage": True}),
                                headers=bearer(key))
    assert answer.status_code == 200
    stream = events(answer.content)
    assert b'"error"' not in answer.content, stream[-3:]
    assert stream[-1] == b"data: [DONE]"
    assert len(stream) > 4 + 1  # (more events than tokens: what this test is about)
    finished = [orjson.loads(event.removeprefix(b"data: ")) for event in stream[:-1]]
    assert [choice["finish_reason"] for chunk in finished for choice in chunk["choices"]
            if choice.get("finish_reason")] == ["length"]
    assert finished[-1]["usage"]["completion_tokens"] == 4


@pytest.mark.parametrize(("payload", "capped"), [
    ({"max_tokens": 4}, True),
    ({"max_tokens": 4, "n": 1}, True),
    ({"max_completion_tokens": 4}, True),
    ({"max_output_tokens": 4}, True),  # (Responses)
    ({"max_tokens": 4, "n": 2}, False),  # two choices: up to twice the cap
    ({}, False),  # no cap named: the engine may go on to the context's end
])
def test_a_stream_is_covered_only_when_its_body_caps_the_output_of_one_choice(payload, capped):
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **payload}
    assert _output_capped(estimate(body), body) is capped


@pytest.mark.parametrize("session_store", ["memory", "off"])
async def test_a_responses_stream_cut_by_its_budget_ends_as_the_stored_response_says(make_settings, session_store):
    """Wherever the budget runs out, the stream's last response object, its items' done events and the
    stored response agree. The budget used to be checked as a read was written, after the dialect had
    read it: a cut in the last read (the fake engine sends its closing events in one) left the response
    stored ``incomplete`` with its whole text while its client got part of it and ``response.failed``."""
    settings = make_settings(api_keys=[READ_KEY], admin_api_keys=[WRITE_KEY], usage_flush_seconds=300,
                             session_store=session_store)
    endings = set()
    async with serving(settings) as gateway:
        model = await model_of(gateway)
        for budget in range(1, 61):  # from refused (below the prompt's bound) to whole (16 tokens and framing)
            key = await new_key(gateway, limits={"budget_tokens": budget, "budget_period": "total"})
            answer = await gateway.post("/v1/responses", json={"model": model, "input": "hi", "stream": True},
                                        headers=bearer(key))
            if answer.status_code == 429:
                continue
            assert answer.status_code == 200, (budget, answer.text)
            stream = [orjson.loads(event.split(b"data: ", 1)[1]) for event in events(answer.content)]
            assert [event["sequence_number"] for event in stream] == list(range(len(stream))), budget
            final = stream[-1]["response"]
            stored = (await gateway.get(f"/v1/responses/{final['id']}", headers=bearer(key))).json()
            assert stored == final, budget
            closed = [event["item"] for event in stream if event["type"] == "response.output_item.done"]
            assert closed == final["output"], budget
            assert all(item["status"] == "incomplete" for item in closed), budget  # (cut by budget or by limit)
            if final["status"] == "failed":
                assert final["error"]["code"] == "insufficient_quota", budget
            text = "".join(event["delta"] for event in stream if event["type"] == "response.output_text.delta")
            assert all(item["content"][0]["text"] == text for item in closed), budget
            endings.add((final["status"], len(closed)))
    # Cut before its item closed, just after, and not cut (the fake engine's answer ends at its limit).
    assert endings == {("failed", 0), ("failed", 1), ("incomplete", 1)}, endings
