"""A forced tool call whose arguments are no JSON object, with the openai SDK and the real engine.

The engine's answer is shown first (the case is real: vLLM 0.32 relays such a call), then the
gateway's: a 502 ``invalid_tool_call``, or a stream that ends with the error event; a call
that is not forced, or one cut by ``max_tokens``, is relayed as the engine wrote it.
"""

from __future__ import annotations

import json
import re

import openai
import pytest

from tests.gateway.protocols.openai.test_openai_sdk import engine_chat

pytestmark = [pytest.mark.integration, pytest.mark.engine]

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}
ASK = [{"role": "user", "content": "weather in Paris?"}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}


def forced(tool_choice=NAMED, tokens: int = 60) -> dict:
    return dict(messages=ASK, tools=[WEATHER], tool_choice=tool_choice, max_tokens=tokens, temperature=0)


def not_an_object(arguments: str) -> bool:
    try:
        return not isinstance(json.loads(arguments), dict)
    except ValueError:
        return True


@pytest.mark.parametrize("tool_choice", [NAMED, "required"], ids=["named", "required"])
def test_a_forced_call_whose_arguments_are_no_object_is_a_502(sdk, engine_model, vllm_engine, tool_choice):
    direct = engine_chat(vllm_engine, **forced(tool_choice))["choices"][0]
    assert direct["finish_reason"] != "length"
    assert not_an_object(direct["message"]["tool_calls"][0]["function"]["arguments"]), direct  # the engine's
    with pytest.raises(openai.APIStatusError) as raised:
        sdk.chat.completions.create(model=engine_model, **forced(tool_choice))
    assert raised.value.status_code == 502
    error = raised.value.body
    assert error["code"] == "invalid_tool_call", error
    assert re.search(r"call of tool 'get_weather' has arguments that are not a JSON object", error["message"])


@pytest.mark.parametrize("tool_choice", [NAMED, "required"], ids=["named", "required"])
def test_a_streamed_forced_call_whose_arguments_are_no_object_ends_with_the_error_event(sdk, engine_model,
                                                                                      tool_choice):
    pieces = []
    with pytest.raises(openai.APIError) as raised:
        for chunk in sdk.chat.completions.create(model=engine_model, stream=True, **forced(tool_choice)):
            for choice in chunk.choices:
                for call in choice.delta.tool_calls or ():
                    pieces.append(call.function.arguments or "")
                assert choice.finish_reason is None  # the call never completes
    assert "call of tool 'get_weather' has arguments that are not a JSON object" in raised.value.message
    assert raised.value.code == "invalid_tool_call"  # (the same code as the non-streamed 502's)
    assert not "".join(pieces).strip()  # not one character of the malformed arguments went out


def test_a_forced_call_cut_by_max_tokens_is_relayed_as_the_engine_answers(sdk, engine_model, vllm_engine):
    direct = engine_chat(vllm_engine, **forced(tokens=12))["choices"][0]
    reply = sdk.chat.completions.create(model=engine_model, **forced(tokens=12)).choices[0]
    assert reply.finish_reason == direct["finish_reason"] == "length"
    assert reply.message.content == direct["message"]["content"]
