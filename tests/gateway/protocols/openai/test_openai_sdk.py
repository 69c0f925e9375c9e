"""The official OpenAI client against the gateway, in front of the real vLLM engine.

Everything a user of the SDK meets: plain and streamed chat and completions,
``n``, seeds, usage in streams, the model list, and the typed errors the SDK
raises for a bad key, an unknown model, bad parameters and a stopped engine.
"""

from __future__ import annotations

import asyncio
import json
import re
import time

import httpx
import openai
import pytest

from tests.support.gateway import READ_KEY

pytestmark = [pytest.mark.integration, pytest.mark.engine]

PROMPT = [{"role": "user", "content": "Write a haiku about the sea."}]


def engine_chat(engine, **body) -> dict:
    """The same chat completion asked of the engine itself, without the gateway (the expected answer)."""
    response = httpx.post(f"{engine.base_url}/v1/chat/completions", json={"model": engine.model, **body},
                          headers=engine.headers, timeout=120)
    response.raise_for_status()
    return response.json()


def test_chat_completion(sdk, engine_model, vllm_engine):
    reply = sdk.chat.completions.create(model=engine_model, messages=PROMPT, max_tokens=12, temperature=0)
    theirs = engine_chat(vllm_engine, messages=PROMPT, max_tokens=12, temperature=0)
    assert reply.object == "chat.completion"
    assert reply.choices[0].message.role == "assistant"
    assert reply.choices[0].message.content == theirs["choices"][0]["message"]["content"]
    assert reply.choices[0].finish_reason == theirs["choices"][0]["finish_reason"]
    assert reply.usage.model_dump(include={"prompt_tokens", "completion_tokens"}) == {
        "prompt_tokens": theirs["usage"]["prompt_tokens"], "completion_tokens": theirs["usage"]["completion_tokens"]}


def test_alias_serves_the_same_model(sdk, engine_model):
    direct = sdk.chat.completions.create(model=engine_model, messages=PROMPT, max_tokens=8, temperature=0)
    aliased = sdk.chat.completions.create(model="stack-2.9", messages=PROMPT, max_tokens=8, temperature=0)
    assert aliased.choices[0].message.content == direct.choices[0].message.content


def test_streamed_chat_matches_the_plain_answer(sdk, engine_model):
    plain = sdk.chat.completions.create(model=engine_model, messages=PROMPT, max_tokens=16, temperature=0)
    stream = sdk.chat.completions.create(model=engine_model, messages=PROMPT, max_tokens=16, temperature=0, stream=True)
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == plain.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == plain.choices[0].finish_reason
    assert all(c.usage is None for c in chunks)  # not asked for, so not forwarded


def test_usage_in_stream_when_asked(sdk, engine_model):
    stream = sdk.chat.completions.create(
        model=engine_model, messages=PROMPT, max_tokens=10, temperature=0, stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    usage_chunks = [c for c in chunks if c.usage is not None]
    assert len(usage_chunks) == 1 and usage_chunks[0].choices == []
    assert usage_chunks[0].usage.completion_tokens == 10


def test_completions_plain_and_streamed(sdk, engine_model):
    plain = sdk.completions.create(model=engine_model, prompt="def add(a, b):", max_tokens=10, temperature=0)
    streamed = sdk.completions.create(model=engine_model, prompt="def add(a, b):", max_tokens=10, temperature=0,
                                      stream=True)
    assert "".join(c.choices[0].text for c in streamed if c.choices) == plain.choices[0].text
    assert plain.usage.completion_tokens == 10


def test_n_returns_that_many_choices(sdk, engine_model):
    reply = sdk.chat.completions.create(model=engine_model, messages=PROMPT, max_tokens=6, n=2, temperature=1.0, seed=3)
    assert sorted(c.index for c in reply.choices) == [0, 1]


def test_seed_makes_sampling_reproducible(sdk, engine_model):
    def sample(seed):
        reply = sdk.chat.completions.create(model=engine_model, messages=PROMPT, max_tokens=16,
                                            temperature=1.0, top_p=1.0, seed=seed)
        return reply.choices[0].message.content

    assert sample(42) == sample(42)
    assert len({sample(1), sample(2), sample(3)}) > 1


def test_structured_output_passes_through(sdk, engine_model):
    schema = {"type": "object", "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
              "required": ["answer"], "additionalProperties": False}
    reply = sdk.chat.completions.create(
        model=engine_model, messages=PROMPT, max_tokens=40, temperature=0,
        extra_body={"structured_outputs": {"regex": r'\{"answer": "(yes|no)"\}'}},
    )
    # The random model would never write this on its own: the engine's
    # guided decoding got the constraint, untouched, through the gateway.
    assert json.loads(reply.choices[0].message.content) in ({"answer": "yes"}, {"answer": "no"})

    # OpenAI's response_format reaches the engine too (the grammar forces a
    # JSON object; this model then pads it with whitespace, which JSON allows).
    reply = sdk.chat.completions.create(
        model=engine_model, messages=PROMPT, max_tokens=8, temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "verdict", "schema": schema}},
    )
    assert reply.choices[0].message.content.lstrip().startswith("{")


def test_vllm_extras_pass_through(sdk, engine_model):
    reply = sdk.chat.completions.create(
        model=engine_model, messages=PROMPT, max_tokens=5, temperature=0,
        extra_body={"top_k": 1, "min_p": 0.0, "repetition_penalty": 1.1,
                    "structured_outputs": {"choice": ["alpha", "beta"]}},
    )
    assert reply.choices[0].message.content in ("alpha", "beta")


def test_tools_reach_the_engines_chat_template(sdk, engine_model, vllm_engine):
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "weather in a city",
                                               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
    reply = sdk.chat.completions.create(model=engine_model, messages=PROMPT, max_tokens=8, temperature=0,
                                        tools=tools, tool_choice="auto")
    theirs = engine_chat(vllm_engine, messages=PROMPT, max_tokens=8, temperature=0, tools=tools, tool_choice="auto")
    without = engine_chat(vllm_engine, messages=PROMPT, max_tokens=8, temperature=0)
    # The template wrote the tool's definition into the prompt: the engine saw the tools.
    assert reply.usage.prompt_tokens == theirs["usage"]["prompt_tokens"] > without["usage"]["prompt_tokens"] + 20
    assert reply.choices[0].message.content == theirs["choices"][0]["message"]["content"]
    assert reply.choices[0].finish_reason == theirs["choices"][0]["finish_reason"]


def test_model_list_has_served_model_and_alias(sdk, engine_model):
    ids = [m.id for m in sdk.models.list()]
    assert engine_model in ids and "stack-2.9" in ids


def test_unknown_model_is_not_found(sdk):
    with pytest.raises(openai.NotFoundError) as caught:
        sdk.chat.completions.create(model="gpt-unknown", messages=PROMPT, max_tokens=4)
    assert "stack-2.9" in caught.value.message


def test_bad_key_is_authentication_error(gateway_url):
    client = openai.OpenAI(base_url=gateway_url + "/v1", api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        client.models.list()


def test_bad_parameters_are_bad_request(sdk, engine_model):
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.chat.completions.create(model=engine_model, messages=PROMPT, max_tokens=4, temperature=-1)
    assert "temperature" in caught.value.message.lower()
    with pytest.raises(openai.BadRequestError):
        sdk.chat.completions.create(model=engine_model, messages="not a list", max_tokens=4)


def test_request_id_reaches_the_engine_made_unique(sdk, engine_model):
    # The client's id is kept (logs, the response header); the engine gets it with a suffix per
    # attempt, since vLLM refuses a request id it already has (vllm #27711).
    ids = set()
    for _ in range(2):
        raw = sdk.chat.completions.with_raw_response.create(
            model=engine_model, messages=PROMPT, max_tokens=2, extra_headers={"X-Request-ID": "trace-42"}
        )
        assert raw.headers["x-request-id"] == "trace-42"
        ids.add(raw.parse().id)
    assert len(ids) == 2 and all(re.fullmatch(r"chatcmpl-trace-42-[0-9a-f]{8}", engine_id) for engine_id in ids)


def test_added_ms_leaves_out_the_time_the_engine_spent(sdk, engine_model, vllm_engine):
    asyncio.run(vllm_engine.wait_until_idle())  # alone on the engine: its latency histogram holds this request only
    before = vllm_engine.metrics()
    started = time.perf_counter()
    raw = sdk.chat.completions.with_raw_response.create(
        model=engine_model, messages=PROMPT, max_tokens=64, temperature=0, extra_body={"ignore_eos": True})
    total_ms = (time.perf_counter() - started) * 1000
    count = "vllm:e2e_request_latency_seconds_count"
    deadline = time.monotonic() + 30
    while (after := vllm_engine.metrics())[count] < before[count] + 1:  # recorded just after the answer
        assert time.monotonic() < deadline, "the engine never recorded the request's latency"
        time.sleep(0.05)
    engine_ms = (after["vllm:e2e_request_latency_seconds_sum"] - before["vllm:e2e_request_latency_seconds_sum"]) * 1000
    added = float(raw.headers["x-gateway-added-ms"])
    # What the engine measured itself (arrival to last token) lies inside the gateway's wait for it,
    # which lies inside the client's total: the header holds the gateway's own time only.
    assert engine_ms > 0 and 0 < added <= total_ms - engine_ms, (added, engine_ms, total_ms)


def test_stopped_engine_is_a_503(dead_engine_gateway_url):
    client = openai.OpenAI(base_url=dead_engine_gateway_url + "/v1", api_key=READ_KEY, max_retries=0)
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="stack-2.9", messages=PROMPT, max_tokens=4)
    assert caught.value.status_code == 503
