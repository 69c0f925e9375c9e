"""The OpenAI stream dialect: the usage-only chunk is tracked always, relayed only when asked for."""

from __future__ import annotations

from gateway.protocols.openai.dialect import OpenAITracker

USAGE_ONLY = b'data: {"id":"x","choices":[],"usage":{"prompt_tokens":1}}'
CONTENT = b'data: {"choices":[{"index":0}],"usage":null}'


def test_the_usage_only_chunk_is_dropped_unless_the_client_asked_for_it():
    assert OpenAITracker(relay_usage=False, collect_text=False).accept([CONTENT, USAGE_ONLY]) == [CONTENT]
    assert OpenAITracker(relay_usage=True, collect_text=False).accept([CONTENT, USAGE_ONLY]) == [CONTENT, USAGE_ONLY]
    tracker = OpenAITracker(relay_usage=False, collect_text=False)
    assert tracker.accept([USAGE_ONLY, CONTENT, b"data: [DONE]"]) == [CONTENT, b"data: [DONE]"]
    assert tracker.ended and tracker.result().usage == {"prompt_tokens": 1}
