"""Anthropic's stream accounting and error envelope, on vLLM-shaped events and errors."""

from __future__ import annotations

import orjson
import pytest

from gateway.engines.errors import parse_error_body
from gateway.failures import UpstreamFailed
from gateway.http.errors import GatewayError
from gateway.protocols.anthropic.dialect import ANTHROPIC, ANTHROPIC_WITH_TOOLS
from gateway.protocols.anthropic.errors import ANTHROPIC_SHAPE, error_body, output_failure
from gateway.relay.sse import event_json
from gateway.tenancy.usage.counts import TokenCounts, counts_of


def ev(kind: str, **fields) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **fields}) + b"\n\n"


def test_usage_is_read_from_the_message_events_and_content_passes_untouched():
    tracker = ANTHROPIC.tracker(relay_usage=False, collect_text=False)
    start = ev("message_start", message={"usage": {"input_tokens": 15, "output_tokens": 0}})
    assert tracker.accept(start) == start
    deltas = ev("content_block_delta", delta={"type": "text_delta", "text": "a"}, index=0) * 3
    assert tracker.accept(deltas) is deltas
    tail = ev("content_block_stop", index=0) + ev("message_delta", delta={"stop_reason": "max_tokens"},
                                                 usage={"input_tokens": 15, "output_tokens": 3}) + ev("message_stop")
    assert tracker.accept(tail) == tail and tracker.ended
    result = tracker.result()
    assert result.usage == {"prompt_tokens": 15, "completion_tokens": 3} and result.finish_reason == "max_tokens"


def test_vllms_internal_error_event_gets_anthropics_type():
    tracker = ANTHROPIC.tracker(relay_usage=False, collect_text=False)
    out = tracker.accept(ev("error", error={"type": "internal_error", "message": "boom"}))
    assert event_json(out) == {"type": "error", "error": {"type": "api_error", "message": "boom"}}
    assert tracker.ended and ANTHROPIC.is_last(out)


def test_errors_take_anthropics_types_by_status():
    types = {status: orjson.loads(error_body(GatewayError(status, "m")))["error"]["type"]
             for status in (400, 401, 403, 404, 413, 429, 500, 502, 503, 504)}
    assert types == {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                     404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
                     502: "api_error", 503: "overloaded_error", 504: "api_error"}


def test_vllms_validation_dump_becomes_a_message_naming_the_field():
    engine = orjson.dumps({"error": {"message": "1 validation error:\n  {'type': 'literal_error', 'loc': "
                                                "'body.messages.0.role', 'msg': \"Input should be 'user' or "
                                                "'assistant'\", 'input': 'bot'}", "type": "Bad Request",
                                     "param": "body.messages.0.role", "code": 400}})
    body = orjson.loads(error_body(ANTHROPIC_SHAPE.http(parse_error_body(400, engine))))
    assert body == {"type": "error", "error": {"type": "invalid_request_error",
                                               "message": "messages.0.role: Input should be 'user' or 'assistant'"}}
    named = orjson.dumps({"type": "error", "error": {"type": "NotFoundError", "message": "The model `x` ..."}})
    assert orjson.loads(error_body(ANTHROPIC_SHAPE.http(parse_error_body(404, named))))["error"] == {
        "type": "not_found_error", "message": "The model `x` ..."}


def test_a_block_the_engine_does_not_take_is_named_not_the_string_content_could_have_been():
    # vLLM 0.32's dump for a 'document' block: content may be a string or a list of blocks, and both fail
    dump = ("2 validation errors:\n  {'type': 'string_type', 'loc': 'body.messages.0.content', 'msg': 'Input should "
            "be a valid string', 'input': '<list of 2 items>'}\n  {'type': 'literal_error', 'loc': "
            "'body.messages.0.content.0.type', 'msg': \"Input should be 'text', 'image', 'tool_use' or "
            "'tool_result'\", 'input': 'document', 'ctx': {'expected': \"'text', 'image', 'tool_use' or "
            "'tool_result'\"}}")
    engine = orjson.dumps({"error": {"message": dump, "type": "Bad Request", "param": "body.messages.0.content",
                                     "code": 400}})
    body = orjson.loads(error_body(ANTHROPIC_SHAPE.http(parse_error_body(400, engine))))
    assert body["error"]["message"] == ("messages.0.content.0.type: Input should be 'text', 'image', 'tool_use' or "
                                        "'tool_result'")


def test_vllms_max_completion_tokens_is_named_max_tokens_as_the_client_sent_it():
    engine = orjson.dumps({"type": "error", "error": {"type": "BadRequestError", "message": (
        "max_completion_tokens=32000 cannot be greater than max_model_len=4096. Please request fewer output tokens. "
        "(parameter=max_completion_tokens, value=32000)")}})
    body = orjson.loads(error_body(ANTHROPIC_SHAPE.http(parse_error_body(400, engine))))
    assert body["error"]["message"] == ("max_tokens=32000 cannot be greater than max_model_len=4096. Please request "
                                        "fewer output tokens. (parameter=max_tokens, value=32000)")


def test_a_cached_prompt_is_counted_whole_with_its_cached_tokens_apart():
    # Anthropic's input_tokens leaves out the tokens read from (or written to) the prompt cache.
    tracker = ANTHROPIC.tracker(relay_usage=False, collect_text=False)
    tracker.accept(ev("message_start", message={"usage": {"input_tokens": 5, "cache_read_input_tokens": 96,
                                                          "output_tokens": 0}}))
    tracker.accept(ev("message_delta", delta={"stop_reason": "end_turn"},
                      usage={"input_tokens": 5, "cache_read_input_tokens": 96, "cache_creation_input_tokens": 4,
                             "output_tokens": 9}) + ev("message_stop"))
    usage = tracker.result().usage
    assert usage == {"prompt_tokens": 105, "completion_tokens": 9, "prompt_tokens_details": {"cached_tokens": 96}}
    assert counts_of(usage) == TokenCounts(prompt=105, completion=9, cached=96, reasoning=0)


def test_a_stream_cut_before_message_delta_keeps_its_cached_input():
    tracker = ANTHROPIC.tracker(relay_usage=False, collect_text=True)
    tracker.accept(ev("message_start", message={"usage": {"input_tokens": 5, "cache_read_input_tokens": 32}}))
    tracker.accept(ev("content_block_delta", delta={"type": "text_delta", "text": "some text"}, index=0))
    usage = tracker.result().usage
    assert usage["prompt_tokens"] == 37 and usage["prompt_tokens_details"] == {"cached_tokens": 32}


def _tool_stream(*pieces: str) -> list[bytes]:
    start = ev("message_start", message={"usage": {"input_tokens": 5, "output_tokens": 0}})
    block = ev("content_block_start", index=0, content_block={"type": "tool_use", "id": "t", "name": "f", "input": {}})
    deltas = [ev("content_block_delta", index=0, delta={"type": "input_json_delta", "partial_json": piece})
              for piece in pieces]
    return [start, block, *deltas, ev("content_block_stop", index=0)]


def _ending(stop_reason: str) -> bytes:
    return ev("message_delta", delta={"stop_reason": stop_reason}, usage={"output_tokens": 3}) + ev("message_stop")


def test_tool_input_that_opens_with_no_brace_fails_at_once():
    tracker = ANTHROPIC_WITH_TOOLS.tracker(relay_usage=False, collect_text=False)
    start, block, blank, number, *_ = _tool_stream(" ", "-6", "21")
    for events in (start, block, blank):  # white space first decides nothing
        assert tracker.accept(events) == events
    with pytest.raises(UpstreamFailed) as raised:
        tracker.accept(number)
    assert raised.value.code == "invalid_tool_call" and "tool 'f'" in raised.value.message


def test_tool_input_left_unfinished_is_a_failure_unless_the_message_stops_at_max_tokens():
    for stop_reason, fails in (("max_tokens", False), ("tool_use", True)):
        tracker = ANTHROPIC_WITH_TOOLS.tracker(relay_usage=False, collect_text=False)
        for events in _tool_stream('{"city": ', '"Par'):
            assert tracker.accept(events) == events  # (a cut call's block stops like any other)
        if fails:
            with pytest.raises(UpstreamFailed):
                tracker.accept(_ending(stop_reason))
        else:
            assert tracker.accept(_ending(stop_reason)) and tracker.ended


def test_a_whole_tool_input_and_an_empty_one_pass_untouched():
    for pieces in (('{"city": ', '"Paris"}'), ()):
        tracker = ANTHROPIC_WITH_TOOLS.tracker(relay_usage=False, collect_text=False)
        for events in [*_tool_stream(*pieces), _ending("tool_use")]:
            assert tracker.accept(events) is events
        assert tracker.ended


async def test_vllms_dump_of_an_answer_it_could_not_build_is_an_invalid_tool_call():
    dump = ("1 validation error for AnthropicContentBlock\ninput\n  Input should be a valid dictionary "
            "[type=dict_type, input_value=-621, input_type=int]\n    For further information visit https://x")
    failure = await output_failure(parse_error_body(400, orjson.dumps({"error": {"message": dump}})))
    assert isinstance(failure, UpstreamFailed) and "('-621')" in failure.message
    assert orjson.loads(error_body(ANTHROPIC_SHAPE.http(failure)))["error"]["type"] == "api_error"
    assert ANTHROPIC_SHAPE.http(failure).status == 502
    other = parse_error_body(400, orjson.dumps({"error": {"message": "messages: Field required"}}))
    assert await output_failure(other) is other  # the request's own fault stays a 400
