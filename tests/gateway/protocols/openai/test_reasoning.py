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
