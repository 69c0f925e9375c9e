"""The OpenAI relay against a fake engine: what goes up, what comes back, every error shape."""

from __future__ import annotations

import asyncio
import re
import socket
import time

import orjson
import pytest

from tests.support.bodies import CHAT, chat_body
from tests.support.gateway import serving


def sse_events(text: str) -> list[str]:
    return [block for block in text.split("\n\n") if block]


async def test_non_streaming_body_reaches_engine_byte_for_byte(client, fake_engine):
    raw = orjson.dumps(chat_body(
        top_k=5, min_p=0.1, repetition_penalty=1.2, seed=7, stop=["x"], n=2, logprobs=True,
        response_format={"type": "json_object"}, chat_template_kwargs={"enable_thinking": False},
        tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        tool_choice="auto", some_future_vllm_param={"nested": [1, 2]},
    ))
    response = await client.post(CHAT, content=raw, headers={"content-type": "application/json"})
    assert response.status_code == 200
    assert fake_engine.last.body == raw  # nothing re-serialised when nothing had to change
    assert response.json()["usage"]["completion_tokens"] == 4


async def test_alias_is_rewritten_to_the_served_model(client, fake_engine):
    response = await client.post(CHAT, json=chat_body(model="stack-2.9"))
    assert response.status_code == 200
    assert fake_engine.last.json["model"] == "fake-model"
    assert fake_engine.last.json["messages"] == [{"role": "user", "content": "hi"}]


async def test_unknown_model_is_a_404_listing_valid_names(client):
    response = await client.post(CHAT, json=chat_body(model="gpt-17"))
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["code"] == "model_not_found" and error["param"] == "model"
    assert "fake-model" in error["message"] and "stack-2.9" in error["message"]
    assert set(error) == {"message", "type", "param", "code"}


@pytest.mark.parametrize(
    ("content", "param"),
    [(b"", "body"), (b"{not json", "body"), (b"[1, 2]", "body"),
     (orjson.dumps(chat_body(stream="yes")), "stream"),
     (orjson.dumps(chat_body(stream=True, stream_options=[1])), "stream_options"),
     (orjson.dumps(chat_body(stream_options={"include_usage": True})), "stream_options"),
     (orjson.dumps(chat_body(session_id="abc")), "session_id")],
)
async def test_bad_bodies_are_400s_naming_the_field(client, fake_engine, content, param):
    response = await client.post(CHAT, content=content, headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == param
    assert fake_engine.received == []  # refused before reaching the engine


async def test_engine_400_keeps_status_and_message(client, fake_engine):
    fake_engine.mode = "http_400"
    response = await client.post(CHAT, json=chat_body(temperature=-1))
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["message"] == "temperature must be non-negative" and error["param"] == "temperature"


async def test_engine_500_is_a_502_with_the_engines_message(client, fake_engine):
    fake_engine.mode = "http_500"
    response = await client.post(CHAT, json=chat_body())
    assert response.status_code == 502
    assert "engine exploded" in response.json()["error"]["message"]


async def test_engine_down_is_a_503(make_settings):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    dead_port = sock.getsockname()[1]
    sock.close()  # nothing listens there any more
    async with serving(make_settings(vllm_base_url=f"http://127.0.0.1:{dead_port}")) as client:
        response = await client.post(CHAT, json=chat_body())
        health = await client.get("/health")
        ready = await client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["error"]["type"] == "service_unavailable"
    assert health.status_code == 200 and health.json()["model_loaded"] is False
    assert ready.status_code == 503


async def test_engine_too_slow_is_a_504(make_settings, fake_engine):
    async with serving(make_settings(upstream_first_byte_timeout=0.2)) as client:
        fake_engine.mode = "hang"
        response = await client.post(CHAT, json=chat_body())
    assert response.status_code == 504
    assert response.json()["error"]["code"] == "engine_timeout"


async def test_stream_strips_usage_unless_asked_but_engine_always_sends_it(client, fake_engine):
    response = await client.post(CHAT, json=chat_body(stream=True))
    assert fake_engine.last.json["stream_options"] == {"include_usage": True}
    events = sse_events(response.text)
    assert events[-1] == "data: [DONE]"
    assert not any('"usage":{' in e for e in events)
    assert len([e for e in events if '"content":"t' in e]) == 4

    response = await client.post(CHAT, json=chat_body(stream=True, stream_options={"include_usage": True}))
    usage_events = [e for e in sse_events(response.text) if '"usage":{' in e]
    assert len(usage_events) == 1
    assert orjson.loads(usage_events[0][6:])["usage"]["completion_tokens"] == 4


@pytest.mark.parametrize("mode", ["break_mid_stream", "no_done"])
async def test_stream_failure_after_start_ends_with_error_event_then_done(client, fake_engine, mode):
    fake_engine.mode = mode
    response = await client.post(CHAT, json=chat_body(stream=True, max_tokens=8))
    events = sse_events(response.text)
    assert response.status_code == 200
    assert events[-1] == "data: [DONE]"
    error = orjson.loads(events[-2][6:])["error"]
    assert error["code"] == "stream_interrupted"
    assert events.count("data: [DONE]") == 1


async def test_stream_error_before_start_keeps_http_status(client, fake_engine):
    fake_engine.mode = "http_400"
    response = await client.post(CHAT, json=chat_body(stream=True))
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "temperature"


async def test_request_id_is_forwarded_and_returned(client, fake_engine):
    response = await client.post(CHAT, json=chat_body(), headers={"x-request-id": "trace-abc.123"})
    assert response.headers["x-request-id"] == "trace-abc.123"
    sent = fake_engine.last.headers["x-request-id"]  # the client's id, made unique for the engine
    assert re.fullmatch(r"trace-abc\.123-[0-9a-f]{8}", sent)

    response = await client.post(CHAT, json=chat_body(), headers={"x-request-id": "bad id with spaces\n"})
    generated = response.headers["x-request-id"]
    assert generated != "bad id with spaces\n" and len(generated) == 24
    assert re.fullmatch(re.escape(generated) + r"-[0-9a-f]{8}", fake_engine.last.headers["x-request-id"])


async def test_a_reused_client_request_id_reaches_the_engine_as_two_ids(client, fake_engine):
    """vLLM refuses (and multi-server engines crashed on, vllm #27711) a request id it already has."""
    for _ in range(2):
        assert (await client.post(CHAT, json=chat_body(stream=True), headers={"x-request-id": "same"})).status_code == 200
    sent = [received.headers["x-request-id"] for received in fake_engine.received[-2:]]
    assert len(set(sent)) == 2 and all(value.startswith("same-") for value in sent)


async def test_added_ms_counts_the_gateway_and_leaves_out_the_engines_time(client, fake_engine):
    fake_engine.response_delay = 0.5  # the engine "generates" for half a second
    started = time.perf_counter()
    response = await client.post(CHAT, json=chat_body())
    total_ms = (time.perf_counter() - started) * 1000
    added = float(response.headers["x-gateway-added-ms"])
    # The gateway's own work is more than nothing; the engine's 500 ms are not in it, whatever the
    # machine's load (the client's total holds the gateway's total, which holds the engine wait).
    assert 0 < added <= total_ms - 500, (added, total_ms)


async def test_completions_route_relays_too(client, fake_engine):
    response = await client.post("/v1/completions", json={"model": "fake-model", "prompt": "x", "max_tokens": 3})
    assert response.status_code == 200
    assert fake_engine.last.path == "/v1/completions"
    streamed = await client.post("/v1/completions", json={"model": "fake-model", "prompt": "x", "max_tokens": 3,
                                                             "stream": True})
    assert sse_events(streamed.text)[-1] == "data: [DONE]"
    assert len([e for e in sse_events(streamed.text) if '"text":"t' in e]) == 3


async def test_models_lists_served_names_and_aliases(client):
    response = await client.get("/v1/models")
    ids = [card["id"] for card in response.json()["data"]]
    assert ids == ["fake-model", "stack-2.9"]


async def test_models_answer_in_openais_and_anthropics_shapes_at_once(client, fake_engine):
    listing = (await client.get("/v1/models")).json()
    assert listing["object"] == "list" and listing["has_more"] is False
    assert (listing["first_id"], listing["last_id"]) == ("fake-model", "stack-2.9")
    one = (await client.get("/v1/models/stack-2.9")).json()
    for card in (*listing["data"], one):
        created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(card["created"]))
        assert card["object"] == card["type"] == "model" and card["owned_by"]
        assert card["display_name"] == card["id"] and card["created_at"] == created
    assert one["id"] == "stack-2.9"


async def test_models_answers_from_the_last_look_when_the_engine_is_frozen(client, fake_engine):
    fake_engine.models_delay = 3600  # the engine accepts the connection and never answers
    # Without the bounded wait this request would hang for UPSTREAM_FIRST_BYTE_TIMEOUT (300 s).
    response = await asyncio.wait_for(client.get("/v1/models"), 30)
    assert response.status_code == 200
    assert [card["id"] for card in response.json()["data"]] == ["fake-model", "stack-2.9"]
    assert response.json()["data"][0]["max_model_len"] == 2048  # the engine's own card, as last read
    one = await asyncio.wait_for(client.get("/v1/models/stack-2.9"), 30)
    assert one.status_code == 200 and one.json()["parent"] == "fake-model"


async def test_models_is_a_504_when_the_engine_is_frozen_and_no_look_read_its_cards(client, fake_engine):
    client.app.state.gateway.engine_state.engines[0].cards = []  # nothing known to answer from
    fake_engine.models_delay = 3600
    response = await asyncio.wait_for(client.get("/v1/models"), 30)
    assert response.status_code == 504 and response.json()["error"]["code"] == "engine_timeout"


async def test_usage_is_counted_per_key_for_streams_and_plain_requests(client):
    await client.post(CHAT, json=chat_body(max_tokens=3))
    await client.post(CHAT, json=chat_body(max_tokens=5, stream=True))
    metrics = (await client.get("/metrics")).text
    assert 'gateway_tokens_total{key_id="local",kind="completion"} 8.0' in metrics
    assert 'gateway_tokens_total{key_id="local",kind="prompt"} 10.0' in metrics
