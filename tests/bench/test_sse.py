"""The load generator's SSE counting holds however the byte stream is cut."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bench.fake_upstream import FakeEngineConfig, _parse_request, iter_stream_frames
from bench.sse import SseCounter


def _stream(*, tokens: int, n: int = 1, usage: bool = True) -> bytes:
    body = (b'{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true,'
            b'"max_tokens":%d,"n":%d,"stream_options":{"include_usage":%s}}'
            % (tokens, n, b"true" if usage else b"false"))
    completion = _parse_request(body, chat=True, config=FakeEngineConfig(model="m"),
                                request_id=None)
    return b"".join(iter_stream_frames(completion))


@given(cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=30),
       tokens=st.integers(min_value=1, max_value=12), n=st.integers(min_value=1, max_value=3))
def test_counts_content_events_across_any_split(cuts, tokens, n):
    body = _stream(tokens=tokens, n=n)
    counter = SseCounter()
    edges = sorted({min(cut, len(body)) for cut in cuts} | {0, len(body)})
    completed = sum(counter.feed(body[a:b]) for a, b in zip(edges, edges[1:], strict=False))
    assert counter.content_events == completed == tokens * n
    assert counter.done and counter.error_events == 0


def test_crlf_ids_comments_and_spaced_json_are_understood():
    body = (b": keep-alive\r\n\r\n"
            b'id: 1\r\ndata: {"choices": [{"delta": {"role": "assistant", "content": ""}}]}\r\n\r\n'
            b'id: 2\r\ndata: {"choices": [{"delta": {"content": "hi"}}]}\r\n\r\n'
            b'id: 3\r\ndata: {"choices": [], "usage": {"completion_tokens": 1}}\r\n\r\n'
            b"data: [DONE]\r\n\r\n")
    counter = SseCounter()
    assert counter.feed(body) == 1
    assert counter.done


def test_error_event_is_counted_and_not_taken_for_content():
    counter = SseCounter()
    counter.feed(b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'
                 b'data: {"error": {"message": "engine died", "code": 502}}\n\ndata: [DONE]\n\n')
    assert (counter.content_events, counter.error_events, counter.done) == (1, 1, True)


def test_truncated_stream_is_not_done():
    body = _stream(tokens=5, usage=False)
    counter = SseCounter()
    counter.feed(body[: body.index(b"data: [DONE]")])
    assert counter.content_events == 5 and not counter.done
