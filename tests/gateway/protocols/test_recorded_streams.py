"""Reasoning, ``thinking`` and ``tool_use`` reach the client intact: recorded engine streams through the gateway.

The embedded model produces none of them, so a recording in vLLM's wire format stands in for
the engine (``tests.support.recorded_engine``): Anthropic's ``thinking`` block with its
``thinking_delta`` and ``signature_delta``, a ``tool_use`` block built from
``input_json_delta`` pieces (the deltas LiteLLM #22997/#29491 saw dropped by gateways), and a
Chat Completions stream with ``reasoning`` / ``reasoning_content`` deltas and a tool call.
"""

from __future__ import annotations

import re

import anthropic
import openai
import orjson
import pytest

from gateway.config import Settings
from tests.support.gateway import READ_KEY, running_gateway
from tests.support.recorded_engine import recorded_engine, recording


def settings(engine, **values) -> Settings:
    return Settings(vllm_base_url=engine.base_url, api_keys=[READ_KEY], access_log=False, engine_poll_interval=60,
                    session_store="off", **values)


def data_of(sse: bytes) -> list[dict]:
    return [orjson.loads(line[6:]) for line in sse.split(b"\n") if line.startswith(b"data: ") and line != b"data: [DONE]"]


async def test_anthropic_thinking_and_tool_use_blocks_reach_the_sdk_whole():
    recorded = recording("anthropic_thinking_tool_use.sse")
    async with recorded_engine(streams={"/v1/messages": recorded}) as engine, \
            running_gateway(settings(engine)) as (url, _):
        client = anthropic.AsyncAnthropic(base_url=url, api_key=READ_KEY, max_retries=0)
        events = []
        async with client.messages.stream(model="fake-model", max_tokens=1024, messages=[
                {"role": "user", "content": "Weather in Paris?"}],
                thinking={"type": "enabled", "budget_tokens": 512}) as stream:
            async for event in stream:
                events.append(event)
            final = await stream.get_final_message()
    deltas = [e.delta.type for e in events if e.type == "content_block_delta"]
    assert deltas == ["thinking_delta", "thinking_delta", "signature_delta", "text_delta", "input_json_delta",
                      "input_json_delta", "input_json_delta"]
    thinking, text, tool = final.content
    assert thinking.type == "thinking" and thinking.thinking == "The user wants the weather; call get_weather for Paris."
    assert thinking.signature == "5f1c0b8e2a3d4c6f9e7b1a2c3d4e5f60"
    assert text.text == "Let me check."
    assert (tool.type, tool.id, tool.name, tool.input) == (
        "tool_use", "toolu_01A09q90qw90lq917835lq9", "get_weather", {"location": "Paris, France", "unit": "c"})
    assert final.stop_reason == "tool_use" and final.usage.output_tokens == 57


async def test_anthropic_recorded_stream_passes_event_for_event():
    recorded = recording("anthropic_thinking_tool_use.sse")
    async with recorded_engine(streams={"/v1/messages": recorded}) as engine, \
            running_gateway(settings(engine)) as (url, _):
        client = anthropic.AsyncAnthropic(base_url=url, api_key=READ_KEY, max_retries=0)
        raw = await client.messages.with_raw_response.create(
            model="fake-model", max_tokens=1024, stream=True, messages=[{"role": "user", "content": "x"}])
        body = await raw.http_response.aread()
    assert [line for line in body.split(b"\n") if line.startswith((b"event: ", b"data: "))] == \
        [line for line in recorded.split(b"\n") if line]


# vLLM's three eras of the reasoning field's name: both (the recording), ``reasoning`` only
# (vllm#33402 on, the engine here), ``reasoning_content`` only (before vllm#27752).
ERAS = {"both": lambda sse: sse,
        "reasoning": lambda sse: re.sub(rb',"reasoning_content":"[^"]*"', b"", sse),
        "reasoning_content": lambda sse: re.sub(rb'"reasoning":"[^"]*",', b"", sse)}


@pytest.mark.parametrize("era", sorted(ERAS))
async def test_chat_reasoning_under_both_names_and_tool_call_deltas_reach_the_openai_sdk(era):
    recorded = recording("chat_reasoning.sse")
    sent = ERAS[era](recorded)
    assert era == "both" or sent.count(b'"reasoning') == recorded.count(b'"reasoning') - 2
    async with recorded_engine(streams={"/v1/chat/completions": sent}) as engine, \
            running_gateway(settings(engine)) as (url, _):
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key=READ_KEY, max_retries=0)
        stream = await client.chat.completions.create(model="fake-model", stream=True, messages=[
            {"role": "user", "content": "2+2?"}], stream_options={"include_usage": True})
        chunks = [chunk async for chunk in stream]
    deltas = [chunk.choices[0].delta for chunk in chunks if chunk.choices]
    extra = [delta.model_extra or {} for delta in deltas]
    assert "".join(e.get("reasoning_content") or "" for e in extra) == "Two plus two is four."
    assert "".join(e.get("reasoning") or "" for e in extra) == "Two plus two is four."
    assert "".join(delta.content or "" for delta in deltas) == "4"
    calls = [call for delta in deltas for call in delta.tool_calls or []]
    assert calls[0].function.name == "record" and calls[0].id == "chatcmpl-tool-1"
    assert "".join(call.function.arguments or "" for call in calls) == '{"answer": 4}'
    assert chunks[-1].usage.completion_tokens == 12
    assert data_of(recorded) == [chunk.model_dump(exclude_unset=True) for chunk in chunks]


@pytest.mark.parametrize("name", ["reasoning", "reasoning_content"])
async def test_a_non_streamed_chat_answer_carries_its_reasoning_under_both_names(name):
    answer = {"id": "chatcmpl-recorded", "object": "chat.completion", "created": 1796400000, "model": "fake-model",
              "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None, "message": {
                  "role": "assistant", "content": "4", name: "Two plus two is four."}}],
              "usage": {"prompt_tokens": 9, "completion_tokens": 12, "total_tokens": 21}}
    async with recorded_engine(answers={"/v1/chat/completions": orjson.dumps(answer)}) as engine, \
            running_gateway(settings(engine)) as (url, _):
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key=READ_KEY, max_retries=0)
        completion = await client.chat.completions.create(model="fake-model", messages=[
            {"role": "user", "content": "2+2?"}])
    message = completion.choices[0].message
    assert message.content == "4"
    assert message.model_extra["reasoning"] == message.model_extra["reasoning_content"] == "Two plus two is four."
