"""The reasoning field under both names, on chunks the way vLLM writes them."""

from __future__ import annotations

import orjson

from gateway.protocols.openai import reasoning
from gateway.relay.sse import event_json, split_events


def chunk(delta: dict | None = None, **fields) -> bytes:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": None}]
    return b"data: " + orjson.dumps({"id": "chatcmpl-1", "choices": choices, **fields}) + b"\n\n"


def test_a_block_without_reasoning_is_returned_as_it_came():
    block = chunk({"content": "a"}) + chunk({"content": 'the \\"reasoning\\": is quoted'})
    assert reasoning.stream_block(block) is block


def test_each_delta_gets_the_name_it_lacks_and_other_events_stay_byte_for_byte():
    content = chunk({"content": "4"})
    usage = chunk(usage={"completion_tokens": 3, "completion_tokens_details": {"reasoning_tokens": 2}})
    for name, other in (("reasoning", "reasoning_content"), ("reasoning_content", "reasoning")):
        block = chunk({name: "Two "}) + content + chunk({name: "plus"}) + usage
        events = split_events(reasoning.stream_block(block))
        assert [event_json(e)["choices"][0]["delta"] for e in events[::2]] == [
            {name: "Two ", other: "Two "}, {name: "plus", other: "plus"}]
        assert events[1] + b"\n\n" == content and events[3] + b"\n\n" == usage


def test_a_delta_with_both_names_is_left_alone():
    block = chunk({"reasoning": "a", "reasoning_content": "a"})
    assert reasoning.stream_block(block) is block


def test_escapes_in_the_reasoning_are_copied_exactly_and_every_choice_is_named():
    text = 'say "hi" \\ then \\"quote\\"\nend'
    data = {"choices": [{"index": i, "delta": {"reasoning": text + str(i)}} for i in range(2)]}
    block = b"data: " + orjson.dumps(data) + b"\n\n"
    deltas = [choice["delta"] for choice in event_json(reasoning.stream_block(block))["choices"]]
    assert deltas == [{"reasoning": text + str(i), "reasoning_content": text + str(i)} for i in range(2)]


def test_a_null_reasoning_is_not_copied():
    block = chunk({"content": "a", "reasoning": None})
    assert reasoning.stream_block(block) is block


# --- non-streamed answers -----------------------------------------------------------------------

def answer_of(message: dict, **usage) -> bytes:
    return orjson.dumps({"id": "chatcmpl-1", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 3, "completion_tokens": 2, **usage}})


async def test_an_answer_whose_reasoning_is_null_is_returned_unparsed():
    body = answer_of({"role": "assistant", "content": "hi", "reasoning": None},
                     completion_tokens_details={"reasoning_tokens": 0})
    assert await reasoning.answer(body) is body
    assert reasoning._some_string(body) is False


async def test_a_reasoning_string_is_named_both_however_the_json_is_spaced():
    for body in (answer_of({"role": "assistant", "content": "hi", "reasoning": "think"}),
                 b'{"choices": [{"message": {"content": "hi", "reasoning_content" :\n "think"}}]}'):
        named = orjson.loads(await reasoning.answer(body))["choices"][0]["message"]
        assert named["reasoning"] == named["reasoning_content"] == "think"


async def test_key_like_text_inside_content_hides_no_reasoning_after_it():
    text = 'he wrote "reasoning": "x", "reasoning_content":'
    body = answer_of({"role": "assistant", "content": text, "reasoning": None})
    assert await reasoning.answer(body) is body
    body = answer_of({"role": "assistant", "content": text, "reasoning": "think"})
    named = orjson.loads(await reasoning.answer(body))["choices"][0]["message"]
    assert named["content"] == text and named["reasoning"] == named["reasoning_content"] == "think"
