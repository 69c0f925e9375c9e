"""Forced tool calls in OpenAI chat streams and answers, on vLLM-shaped chunks (the tracker alone)."""

from __future__ import annotations

import orjson
import pytest

from gateway.failures import UpstreamFailed
from gateway.protocols.openai.forced_tools import FORCED_CALL, check_answer, forces_a_call


def chunk(arguments: str | None = None, *, name: str | None = None, finish: str | None = None) -> bytes:
    delta = {}
    if arguments is not None or name is not None:
        function = {key: value for key, value in (("name", name), ("arguments", arguments)) if value is not None}
        delta["tool_calls"] = [{"index": 0, "function": function}]
    return b"data: " + orjson.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}) + b"\n\n"


def test_only_a_named_or_required_tool_choice_forces_a_call():
    tools = [{"type": "function", "function": {"name": "f"}}]
    assert forces_a_call({"tools": tools, "tool_choice": "required"})
    assert forces_a_call({"tools": tools, "tool_choice": {"type": "function", "function": {"name": "f"}}})
    assert not forces_a_call({"tools": tools, "tool_choice": "auto"}) and not forces_a_call({"tools": tools})


def test_arguments_that_open_with_no_brace_end_the_stream():
    tracker = FORCED_CALL.tracker(relay_usage=False, collect_text=False)
    assert tracker.accept(chunk(name="f", arguments=""))
    with pytest.raises(UpstreamFailed) as raised:
        tracker.accept(chunk("-621"))
    assert raised.value.code == "invalid_tool_call" and "tool 'f'" in raised.value.message


def test_unfinished_arguments_fail_unless_the_choice_was_cut_by_its_limit():
    for finish, fails in (("length", False), ("tool_calls", True), ("stop", True)):
        tracker = FORCED_CALL.tracker(relay_usage=False, collect_text=False)
        tracker.accept(chunk(name="f", arguments='{"city": "Pa'))
        if fails:
            with pytest.raises(UpstreamFailed):
                tracker.accept(chunk(finish=finish))
        else:
            tracker.accept(chunk(finish=finish))


async def test_a_non_streamed_answer_with_a_cut_call_passes_and_an_invalid_one_fails():
    def answer(arguments: str, finish: str) -> bytes:
        call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": arguments}}
        return orjson.dumps({"choices": [{"index": 0, "finish_reason": finish,
                                          "message": {"role": "assistant", "tool_calls": [call]}}]})
    for body in (answer('{"city": "Paris"}', "stop"), answer('{"city": "Pa', "length")):
        assert await check_answer(body) is body
    with pytest.raises(UpstreamFailed):
        await check_answer(answer("-621", "tool_calls"))


async def test_chunks_and_answers_of_other_shapes_are_passed_not_crashed_on():
    tracker = FORCED_CALL.tracker(relay_usage=False, collect_text=False)
    odd = [{"choices": [{"index": [0], "delta": {"tool_calls": [{"index": 0}]}}]},
           {"choices": [{"index": 0, "delta": {"tool_calls": ["x", {"index": {}}, {"index": 0, "function": 5}]}}]},
           {"choices": [{"index": 0, "delta": []}]}, {"choices": "x"}, ["x"]]
    for data in odd:
        block = b'data: {"tool_calls":[]}\n\n' if not isinstance(data, dict) else \
            b"data: " + orjson.dumps(data).replace(b'"choices"', b'"tool_calls":[],"choices"') + b"\n\n"
        tracker.accept(block)
    answer = orjson.dumps({"tool_calls": [], "choices": [{"message": [], "finish_reason": "stop"},
                                                         {"message": {"tool_calls": ["x"]}}]})
    with pytest.raises(UpstreamFailed):  # a call that is no object at all carries no arguments object
        await check_answer(answer)
