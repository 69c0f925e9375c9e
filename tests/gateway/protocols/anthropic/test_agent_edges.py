"""What coding agents meet on /v1/messages at the edges, with the anthropic SDK and the real engine.

A forced tool call whose input is no object, a prompt count past the context, a failed tool's
result, extended thinking on an engine without a reasoning parser. Each test first shows what
the engine itself does with the request (the case is real), then what the gateway answers.
"""

from __future__ import annotations

import re

import anthropic
import httpx
import orjson
import pytest

from gateway.protocols.anthropic.count import chat_messages, chat_tools
from tests.gateway.protocols.conftest import KEY_A, engine_post, headers

pytestmark = [pytest.mark.integration, pytest.mark.engine]

WEATHER = {"name": "get_weather", "description": "The weather in a city.",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
ASK = [{"role": "user", "content": "weather in Paris?"}]


@pytest.fixture
def claude(gateway_url) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gateway_url, api_key=KEY_A, max_retries=0)


def forced(engine, tokens: int = 60, **extra) -> dict:
    """The greedy forced call, as a request body."""
    return dict(model=engine.model, max_tokens=tokens, messages=ASK, tools=[WEATHER],
                tool_choice={"type": "tool", "name": "get_weather"}, temperature=0, **extra)


def sdk(body: dict) -> dict:
    """A request body as the SDK's arguments (this SDK takes no ``temperature``: sent as an extra)."""
    args = {name: value for name, value in body.items() if name not in ("stream", "temperature")}
    return {**args, "extra_body": {"temperature": body["temperature"]}} if "temperature" in body else args


def sse_events(text: str) -> list[tuple[str, dict]]:
    events = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if line and not line.startswith(":"))
        if "data" in lines:
            events.append((lines.get("event", ""), orjson.loads(lines["data"])))
    return events


def test_the_engine_writes_a_forced_call_whose_input_is_no_object(vllm_engine):
    """The case the tests below stand on: vLLM 0.32's answer to this greedy forced call."""
    direct = engine_post(vllm_engine, "/v1/messages", forced(vllm_engine))
    assert direct.status_code == 400 and "Input should be a valid dictionary" in direct.text, direct.text
    streamed = sse_events(engine_post(vllm_engine, "/v1/messages", forced(vllm_engine, stream=True)).text)
    started = [d for k, d in streamed if k == "content_block_start"]
    assert started and started[0]["content_block"]["type"] == "tool_use"
    partial = "".join(d["delta"]["partial_json"] for k, d in streamed if k == "content_block_delta")
    assert not isinstance(orjson.loads(partial), dict), partial  # the engine relays it as a tool_use block


def test_a_forced_call_whose_input_is_no_object_is_a_502_api_error(claude, vllm_engine):
    with pytest.raises(anthropic.APIStatusError) as raised:
        claude.messages.create(**sdk(forced(vllm_engine)))
    assert raised.value.status_code == 502
    error = raised.value.body["error"]
    assert error["type"] == "api_error"
    # (the number the engine writes varies: a prefix-cache hit can change a greedy answer on CPU)
    assert re.search(r"call of a tool has arguments that are not a JSON object \('-?\d+'\)", error["message"]), error
    assert "validation error" not in error["message"]


def test_a_streamed_forced_call_whose_input_is_no_object_ends_with_the_error_event(claude, gateway_url,
                                                                                  vllm_engine):
    body = forced(vllm_engine, stream=True)
    text = httpx.post(gateway_url + "/v1/messages", json=body, headers=headers(), timeout=120).text
    events = sse_events(text)
    kinds = [kind for kind, _ in events]
    assert kinds[0] == "message_start" and kinds[-1] == "error", kinds
    error = events[-1][1]["error"]
    assert error["type"] == "api_error" and "'get_weather'" in error["message"]
    assert "not a JSON object" in error["message"], error
    assert "content_block_stop" not in kinds and "message_stop" not in kinds  # no malformed block completed
    with pytest.raises(anthropic.APIStatusError) as raised:
        with claude.messages.stream(**sdk(forced(vllm_engine))) as stream:
            for _ in stream:
                pass
    assert "not a JSON object" in str(raised.value)


def test_a_forced_call_cut_by_max_tokens_is_relayed_as_the_engine_answers(claude, vllm_engine):
    """A call cut by the limit is the client's limit, not an invalid call: the engine's answer, unchanged."""
    message = claude.messages.create(**sdk(forced(vllm_engine, tokens=12)))
    direct = engine_post(vllm_engine, "/v1/messages", forced(vllm_engine, tokens=12)).json()
    assert message.stop_reason == direct["stop_reason"] == "max_tokens"
    assert [block.model_dump(exclude_none=True) for block in message.content] == direct["content"]


THINK = {"type": "enabled", "budget_tokens": 1024}
HELLO = [{"role": "user", "content": "Hello there"}]


def test_the_engine_without_a_reasoning_parser_refuses_a_thinking_budget(vllm_engine):
    body = {"model": vllm_engine.model, "max_tokens": 2048, "messages": HELLO, "thinking": THINK}
    direct = engine_post(vllm_engine, "/v1/messages", body)
    assert direct.status_code == 400 and "thinking_token_budget" in direct.text, direct.text
    streamed = sse_events(engine_post(vllm_engine, "/v1/messages", {**body, "stream": True}).text)
    assert [kind for kind, _ in streamed] == ["error"], streamed  # a 200 whose only event is the error


def test_extended_thinking_with_a_budget_is_answered_as_adaptive_thinking(claude, vllm_engine):
    """What Claude Code sends when its user turns thinking on: answered, streamed or not, the
    dropped budget named in a header; the answer is the engine's for ``{"type": "adaptive"}``."""
    # (a budget must be below max_tokens, and at least 1024, in vLLM as in Anthropic's API)
    args = dict(model=vllm_engine.model, max_tokens=1025, messages=HELLO, extra_body={"temperature": 0})
    raw = claude.messages.with_raw_response.create(thinking=THINK, **args)
    message = raw.parse()
    assert raw.headers["x-gateway-thinking-budget-ignored"] == "budget_tokens 1024"
    adaptive = engine_post(vllm_engine, "/v1/messages", {"model": vllm_engine.model, "max_tokens": 1025,
                                                         "messages": HELLO, "temperature": 0,
                                                         "thinking": {"type": "adaptive"}}).json()
    # (not the text itself: on the CPU engine a prefix-cache hit can change a long greedy answer)
    assert message.stop_reason == adaptive["stop_reason"] and message.usage.output_tokens == adaptive["usage"][
        "output_tokens"]
    assert [block.type for block in message.content] == [block["type"] for block in adaptive["content"]]
    with claude.messages.stream(thinking=THINK, **args) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert stream.response.headers["x-gateway-thinking-budget-ignored"] == "budget_tokens 1024"
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and final.stop_reason == message.stop_reason
    plain = claude.messages.with_raw_response.create(thinking={"type": "adaptive"}, **args)
    assert "x-gateway-thinking-budget-ignored" not in plain.headers  # nothing to drop: untouched


def engine_context(engine) -> int:
    models = httpx.get(engine.base_url + "/v1/models", headers=engine.headers, timeout=30).json()
    return next(card["max_model_len"] for card in models["data"] if card["id"] == engine.model)


def test_count_tokens_counts_a_prompt_longer_than_the_context(claude, vllm_engine):
    context = engine_context(vllm_engine)
    long = "hello world " * context  # several tokens a repeat
    body = {"model": vllm_engine.model, "system": "Be brief.", "messages": [{"role": "user", "content": long}]}
    refused = engine_post(vllm_engine, "/v1/messages/count_tokens", body)
    assert refused.status_code == 400 and "maximum context length" in refused.text  # vLLM's: no count
    # The count of the same prompt as chat messages, from the engine's /tokenize (which checks no length).
    expected = engine_post(vllm_engine, "/tokenize", {
        "model": vllm_engine.model, "add_generation_prompt": True,
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": long}]}).json()["count"]
    counted = claude.messages.count_tokens(**body)
    assert counted.input_tokens == expected > context


CONVERSATION = {
    "system": [{"type": "text", "text": "You are a coding agent."}, {"type": "text", "text": " Be brief."}],
    "tools": [WEATHER, {"name": "read_file", "description": "Read a file.",
                        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}],
    "messages": [
        {"role": "user", "content": "weather in Paris?"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "Call the tool.", "signature": "s"},
                                          {"type": "text", "text": "Let me look."},
                                          {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                           "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": [{"type": "text", "text": "sunny"}, {"type": "text", "text": "21C"}]},
                                     {"type": "text", "text": "and tomorrow?"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_2", "name": "read_file",
                                           "input": {"path": "/tmp/x"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2", "content": "no such file"}]},
    ],
}


def test_the_count_past_the_context_renders_a_conversation_as_vllms_count(vllm_engine):
    """The gateway's rendering of a Messages request for /tokenize (used only past the context) counts
    what vLLM's own count_tokens counts, for a conversation with every kind of block agents send."""
    body = {"model": vllm_engine.model, **CONVERSATION}
    theirs = engine_post(vllm_engine, "/v1/messages/count_tokens", body).json()["input_tokens"]
    ours = engine_post(vllm_engine, "/tokenize", {"model": vllm_engine.model, "add_generation_prompt": True,
                                                  "messages": chat_messages(body), "tools": chat_tools(body)})
    assert ours.json()["count"] == theirs


FAILED = [
    {"role": "user", "content": "weather in Paris?"},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                       "input": {"city": "Paris"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "is_error": True,
                                  "content": "ConnectionError: the weather service is down"}]},
]


def test_a_failed_tools_result_reaches_the_model_as_a_failure(claude, vllm_engine):
    """vLLM drops ``is_error``: the model would read a failure as a result. Through the gateway the
    tool's message opens with the documented words, as if the client had written them there."""
    body = {"model": vllm_engine.model, "tools": [WEATHER], "messages": FAILED}
    as_flag = engine_post(vllm_engine, "/v1/messages/count_tokens", body).json()["input_tokens"]
    unflagged = [*FAILED[:2], {"role": "user", "content": [{**FAILED[2]["content"][0], "is_error": False}]}]
    assert engine_post(vllm_engine, "/v1/messages/count_tokens",
                       {**body, "messages": unflagged}).json()["input_tokens"] == as_flag  # the flag is lost
    worded = [*FAILED[:2], {"role": "user", "content": [{
        "type": "tool_result", "tool_use_id": "toolu_1",
        "content": [{"type": "text", "text": "Error: the tool failed."},
                    {"type": "text", "text": "ConnectionError: the weather service is down"}]}]}]
    expected = engine_post(vllm_engine, "/v1/messages/count_tokens", {**body, "messages": worded}).json()
    assert claude.messages.count_tokens(**body).input_tokens == expected["input_tokens"] > as_flag
    usage = claude.messages.create(max_tokens=4, **body).usage  # and a generation renders the same prompt
    cached = (usage.cache_read_input_tokens or 0) + (usage.cache_creation_input_tokens or 0)
    assert usage.input_tokens + cached == expected["input_tokens"]


def test_a_generation_past_the_context_names_the_prompts_real_length(claude, vllm_engine):
    """vLLM stops counting one token past the context ("at least 65537"); clients read the number to
    know how much to cut, so the gateway's "prompt is too long" names the prompt's real length."""
    context = engine_context(vllm_engine)
    long = "hello world " * context
    expected = engine_post(vllm_engine, "/tokenize", {"model": vllm_engine.model, "add_generation_prompt": True,
                                                      "messages": [{"role": "user", "content": long}]}).json()
    with pytest.raises(anthropic.BadRequestError) as raised:
        claude.messages.create(model=vllm_engine.model, max_tokens=8, messages=[{"role": "user", "content": long}])
    message = raised.value.body["error"]["message"]
    assert message == f"prompt is too long: {expected['count']} tokens > {context} maximum", message
