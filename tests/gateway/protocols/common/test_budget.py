"""Output budgets that fit the context (``protocols.common.budget``): lowered with a header, or the protocol's 400.

A recorded engine (context 4,096 tokens) counts every prompt as ``prompt_tokens``; each test
reads what the engine received and what the client got.
"""

from __future__ import annotations

import orjson
import pytest

from gateway.config import Settings
from gateway.protocols.common.budget import HEADER, prompt_bound
from tests.support.gateway import READ_KEY, bearer, serving
from tests.support.recorded_engine import recorded_engine

CONTEXT = 4096
CHAT_STREAM = (b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"fake-model","choices":'
               b'[{"index":0,"delta":{"content":"x"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n')
MESSAGES_STREAM = (b'event: message_start\ndata: {"type":"message_start","message":{"id":"m","type":"message",'
                   b'"role":"assistant","content":[],"model":"fake-model","usage":{"input_tokens":1,"output_tokens":0}}}'
                   b'\n\nevent: message_stop\ndata: {"type":"message_stop"}\n\n')
RESPONSES_STREAM = (b'event: response.completed\ndata: {"type":"response.completed","response":{"id":"r",'
                    b'"object":"response","status":"completed","output":[],"usage":{"input_tokens":1,'
                    b'"output_tokens":1,"total_tokens":2}}}\n\n')
STREAMS = {"/v1/chat/completions": CHAT_STREAM, "/v1/completions": CHAT_STREAM, "/v1/messages": MESSAGES_STREAM,
           "/v1/responses": RESPONSES_STREAM}
HEADERS = bearer(READ_KEY)


def settings(engine) -> Settings:
    return Settings(vllm_base_url=engine.base_url, api_keys=[READ_KEY], access_log=False, engine_poll_interval=60,
                    session_store="off")


async def post(prompt_tokens: int, path: str, body: dict):
    async with recorded_engine(streams=STREAMS, max_model_len=CONTEXT, prompt_tokens=prompt_tokens) as engine, \
            serving(settings(engine)) as client:
        response = await client.post(path, json=body, headers=HEADERS)
        return response, engine


def chat(**fields) -> dict:
    return {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "stream": True, **fields}


@pytest.mark.parametrize(("field", "value"), [("max_tokens", 32000), ("max_completion_tokens", 10**6)])
async def test_a_chat_limit_beyond_the_context_is_lowered_to_the_room_left_and_said_so(field, value):
    response, engine = await post(1000, "/v1/chat/completions", chat(**{field: value}))
    assert response.status_code == 200
    assert engine.bodies("/v1/chat/completions")[0][field] == CONTEXT - 1000
    assert response.headers[HEADER] == f"{field} {value} -> {CONTEXT - 1000}"
    counted = engine.bodies("/tokenize")[0]
    assert counted["messages"] == [{"role": "user", "content": "hi"}] and counted["add_generation_prompt"] is True


async def test_a_limit_that_obviously_fits_costs_no_count_and_no_header():
    response, engine = await post(1000, "/v1/chat/completions", chat(max_tokens=100))
    assert response.status_code == 200 and HEADER not in response.headers
    assert engine.bodies("/tokenize") == [] and engine.bodies("/v1/chat/completions")[0]["max_tokens"] == 100


async def test_a_limit_that_might_not_fit_is_counted_and_kept_when_it_does():
    limit = CONTEXT - prompt_bound(0) + 1  # beyond the bound for any body, within the real room
    response, engine = await post(50, "/v1/chat/completions", chat(max_tokens=limit))
    assert len(engine.bodies("/tokenize")) == 1
    assert engine.bodies("/v1/chat/completions")[0]["max_tokens"] == limit and HEADER not in response.headers


async def test_a_chat_prompt_that_fills_the_context_is_openais_400_naming_its_fields():
    response, engine = await post(CONTEXT, "/v1/chat/completions", chat(max_tokens=CONTEXT))
    error = response.json()["error"]
    assert response.status_code == 400 and error["code"] == "context_length_exceeded"
    assert error["param"] == "messages" and "'max_completion_tokens'" in error["message"]
    assert str(CONTEXT) in error["message"] and engine.bodies("/v1/chat/completions") == []


async def test_a_completion_prompt_is_counted_by_tokenize():
    response, engine = await post(96, "/v1/completions", {"model": "fake-model", "prompt": "def f():",
                                                          "max_tokens": 99999, "stream": True})
    assert engine.bodies("/tokenize")[0]["prompt"] == "def f():"
    assert engine.bodies("/v1/completions")[0]["max_tokens"] == CONTEXT - 96
    assert response.headers[HEADER] == f"max_tokens 99999 -> {CONTEXT - 96}"


async def test_anthropic_max_tokens_is_lowered_after_count_tokens():
    body = {"model": "fake-model", "max_tokens": 32000, "stream": True, "system": "be brief",
            "messages": [{"role": "user", "content": "hi"}], "tools": [{"name": "t", "input_schema": {}}]}
    response, engine = await post(3000, "/v1/messages", body)
    assert response.status_code == 200
    counted = engine.bodies("/v1/messages/count_tokens")[0]
    assert "max_tokens" not in counted and counted["system"] == "be brief" and counted["tools"] == body["tools"]
    assert engine.bodies("/v1/messages")[0]["max_tokens"] == CONTEXT - 3000
    assert response.headers[HEADER] == f"max_tokens 32000 -> {CONTEXT - 3000}"


@pytest.mark.parametrize(("prompt_tokens", "message"), [
    # the engine's count_tokens refuses a prompt past the context (it stops one token beyond it):
    # /tokenize counts it, and the message names its real length
    (CONTEXT + 5, f"prompt is too long: {CONTEXT + 5} tokens > {CONTEXT} maximum"),
    # a prompt that fills the context exactly leaves no room for max_tokens
    (CONTEXT, f"input length and `max_tokens` exceed context limit: {CONTEXT} + 32000 > {CONTEXT}, "
              "decrease input length or `max_tokens` and try again"),
])
async def test_an_anthropic_prompt_that_fills_the_context_is_anthropics_400_in_anthropics_words(prompt_tokens,
                                                                                                  message):
    body = {"model": "fake-model", "max_tokens": 32000, "messages": [{"role": "user", "content": "hi"}]}
    response, engine = await post(prompt_tokens, "/v1/messages", body)
    assert response.status_code == 400
    assert response.json() == {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    assert engine.bodies("/v1/messages") == []  # refused before any generation


async def test_responses_max_output_tokens_is_lowered_from_an_estimate_of_the_input():
    body = {"model": "fake-model", "input": [{"role": "developer", "content": "rules"},
                                             {"type": "message", "role": "user", "content": [
                                                 {"type": "input_text", "text": "hi"}]}],
            "instructions": "sys", "max_output_tokens": 50000, "stream": True, "store": False,
            "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}, {"type": "web_search"}]}
    response, engine = await post(700, "/v1/responses", body)
    assert response.status_code == 200 and response.headers[HEADER] == f"max_output_tokens 50000 -> {CONTEXT - 700}"
    assert engine.bodies("/v1/responses")[0]["max_output_tokens"] == CONTEXT - 700
    counted = engine.bodies("/tokenize")[0]
    assert counted["messages"] == [{"role": "system", "content": "sys"}, {"role": "system", "content": "rules"},
                                   {"role": "user", "content": "hi"}]
    assert [tool["function"]["name"] for tool in counted["tools"]] == ["f", "web_search"]


async def test_a_responses_estimate_over_the_context_leaves_the_decision_to_the_engine():
    body = {"model": "fake-model", "input": "hi", "max_output_tokens": 50000, "stream": True, "store": False}
    response, engine = await post(CONTEXT + 1, "/v1/responses", body)
    assert response.status_code == 200 and HEADER not in response.headers
    assert engine.bodies("/v1/responses")[0]["max_output_tokens"] == 50000


def test_the_bound_holds_for_a_body_of_any_size():
    assert prompt_bound(0) > 0 and prompt_bound(78_000) >= 78_000 and orjson.dumps(prompt_bound(1))
