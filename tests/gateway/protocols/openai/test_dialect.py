"""The OpenAI stream dialect: the usage-only chunk is tracked always, relayed only when asked for."""

from __future__ import annotations

from gateway.protocols.openai.dialect import OpenAITracker

USAGE_ONLY = b'data: {"id":"x","choices":[],"usage":{"prompt_tokens":1}}'
CONTENT = b'data: {"choices":[{"index":0}],"usage":null}'


def block(*events: bytes) -> bytes:
    return b"".join(event + b"\n\n" for event in events)


def test_the_usage_only_chunk_is_dropped_unless_the_client_asked_for_it():
    assert OpenAITracker(relay_usage=False, collect_text=False).accept(block(CONTENT, USAGE_ONLY)) == block(CONTENT)
    kept = OpenAITracker(relay_usage=True, collect_text=False).accept(block(CONTENT, USAGE_ONLY))
    assert kept == block(CONTENT, USAGE_ONLY)
    tracker = OpenAITracker(relay_usage=False, collect_text=False)
    assert tracker.accept(block(USAGE_ONLY, CONTENT, b"data: [DONE]")) == block(CONTENT, b"data: [DONE]")
    assert tracker.ended and tracker.result().usage == {"prompt_tokens": 1}


def test_a_block_of_content_chunks_is_relayed_as_it_is_and_counted():
    tracker = OpenAITracker(relay_usage=False, collect_text=False)
    content = block(CONTENT, CONTENT, CONTENT)
    assert tracker.accept(content) is content  # the common case: no copy, no split
    assert not tracker.ended and tracker.result().estimated_usage() == {"prompt_tokens": 0, "completion_tokens": 3}


def test_a_whole_stream_in_one_read_keeps_its_content_drops_the_usage_chunk_and_ends():
    tracker = OpenAITracker(relay_usage=False, collect_text=False)
    whole = block(*[CONTENT] * 50, USAGE_ONLY, b"data: [DONE]")
    assert tracker.accept(whole) == block(*[CONTENT] * 50, b"data: [DONE]")
    assert tracker.ended and tracker.result().usage == {"prompt_tokens": 1}
    assert tracker.result().content_events == 50


def test_a_done_line_inside_a_content_string_neither_ends_the_stream_nor_changes_it():
    quoting = b'data: {"choices":[{"index":0,"delta":{"content":"data: [DONE]"}}]}'
    tracker = OpenAITracker(relay_usage=False, collect_text=False)
    assert tracker.accept(block(CONTENT, quoting, CONTENT)) == block(CONTENT, quoting, CONTENT)
    assert not tracker.ended and tracker.result().content_events == 3


def test_nothing_after_done_is_relayed():
    tracker = OpenAITracker(relay_usage=True, collect_text=False)
    assert tracker.accept(block(CONTENT, b"data: [DONE]", CONTENT)) == block(CONTENT, b"data: [DONE]")
    assert tracker.ended


def test_a_tracker_told_not_to_count_leaves_the_count_to_its_caller():
    tracker = OpenAITracker(relay_usage=False, collect_text=False, count_events=False)
    assert tracker.accept(block(CONTENT, CONTENT, USAGE_ONLY, b"data: [DONE]")) == block(CONTENT, CONTENT,
                                                                                      b"data: [DONE]")
    assert tracker.ended and tracker.result().content_events is None
    assert tracker.result().usage == {"prompt_tokens": 1}


def test_the_role_chunks_that_open_a_chat_stream_are_not_counted_as_tokens():
    # vLLM opens a chat stream with one role-only chunk per choice, then one chunk per token;
    # a stream cut before its usage chunk is billed 3 tokens here, not 5.
    role = b'data: {"choices":[{"index":%d,"delta":{"role":"assistant","content":""}}]}'
    quoted = b'data: {"choices":[{"index":0,"delta":{"content":"\\"role\\":\\"assistant\\""}}]}'
    tracker = OpenAITracker(relay_usage=False, collect_text=False)
    tracker.accept(block(role % 0, role % 1, CONTENT))
    tracker.accept(block(quoted, CONTENT))
    assert tracker.result().estimated_usage() == {"prompt_tokens": 0, "completion_tokens": 3}
    only_roles = OpenAITracker(relay_usage=False, collect_text=False)
    only_roles.accept(block(role % 0))
    assert only_roles.result().estimated_usage() is None  # nothing generated, nothing billed


def test_a_traced_stream_reads_its_finish_reason_without_decoding_the_rest():
    running = b'data: {"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}'
    quoting = b'data: {"choices":[{"index":0,"delta":{"content":"\\"finish_reason\\":\\"stop\\""},"finish_reason":null}]}'
    second_ends = b'data: {"choices":[{"index":1,"delta":{},"finish_reason":"stop"}]}'
    first_ends = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}'
    tracker = OpenAITracker(relay_usage=False, collect_text=False, finish_reason=True)
    for read in (block(running, quoting), block(second_ends), block(running)):
        assert tracker.accept(read) is read  # relayed as it came
    assert tracker.result().finish_reason is None  # a quoted field in the text, another choice's end: not it
    tracker.accept(block(first_ends, USAGE_ONLY, b"data: [DONE]"))  # its end coalesced with the last events
    assert tracker.ended and tracker.result().finish_reason == "length"
    apart = OpenAITracker(relay_usage=False, collect_text=False, finish_reason=True)
    for read in (block(running), block(running, first_ends), block(USAGE_ONLY), block(b"data: [DONE]")):
        apart.accept(read)
    assert apart.ended and apart.result().finish_reason == "length"
    # A whole stream in one read (searched from its end): choice 0's finish, before another choice's.
    whole = OpenAITracker(relay_usage=False, collect_text=False, finish_reason=True)
    whole.accept(block(running, first_ends, quoting, second_ends, USAGE_ONLY, b"data: [DONE]"))
    assert whole.ended and whole.result().finish_reason == "length"
    # The last read ends only another choice: choice 0's end is in the read before.
    before = OpenAITracker(relay_usage=False, collect_text=False, finish_reason=True)
    for read in (block(running, first_ends), block(second_ends, USAGE_ONLY, b"data: [DONE]")):
        before.accept(read)
    assert before.ended and before.result().finish_reason == "length"
