"""Small pure parts: key ring, admission counters, SSE framing."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.http.admission import Admission
from gateway.http.auth import KeyRing, bearer_token
from gateway.protocols.openai.dialect import OpenAITracker
from gateway.relay.sse import SSEFramer


def test_keyring_resolves_rights_and_stores_no_clear_text():
    hashed = "sha256:" + hashlib.sha256(b"admin-key").hexdigest()
    ring = KeyRing(read_keys=["read-key"], write_keys=[hashed])
    assert ring.authenticate("read-key").can_write is False
    assert ring.authenticate("admin-key").can_write is True
    assert ring.authenticate("nope") is None
    assert "read-key" not in repr(ring.__dict__)


def test_keyring_rejects_malformed_hashes():
    with pytest.raises(ValueError, match="64 hex digits"):
        KeyRing(read_keys=["sha256:abc"], write_keys=[])


@pytest.mark.parametrize(
    ("header", "token"),
    [(b"Bearer abc", "abc"), (b"bearer  abc ", "abc"), (b"Basic abc", None), (b"Bearer", None), (None, None)],
)
def test_bearer_token(header, token):
    assert bearer_token(header) == token


def test_admission_counts_and_releases():
    admission = Admission(max_inflight=3, max_inflight_per_key=2)
    assert admission.try_enter("a") is None and admission.try_enter("a") is None
    assert "this API key" in admission.try_enter("a")
    assert admission.try_enter("b") is None
    assert "the gateway" in admission.try_enter("c")
    admission.leave("a")
    assert admission.try_enter("c") is None
    for key in ("a", "b", "c"):
        admission.leave(key)
    assert admission.inflight == 0
    assert admission.try_enter("a") is None and admission.try_enter("a") is None  # a's whole cap is free again


# SSE data lines hold no CR or LF (both end a line in SSE).
EVENTS = st.lists(
    st.binary(min_size=1, max_size=40).map(lambda b: b"data: " + b.replace(b"\n", b" ").replace(b"\r", b" ")),
    min_size=1,
    max_size=20,
)


@given(events=EVENTS, cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=10))
def test_framer_returns_the_same_events_however_the_bytes_are_cut(events, cuts):
    stream = b"".join(e + b"\n\n" for e in events)
    positions = sorted({c % (len(stream) + 1) for c in cuts})
    pieces = [stream[a:b] for a, b in zip([0, *positions], [*positions, len(stream)], strict=True)]
    framer = SSEFramer()
    out = [event for piece in pieces for event in framer.feed(piece)]
    assert out == events
    assert framer.feed(b"\n\n") == []  # nothing was left half-read


def test_framer_accepts_crlf_and_keeps_partial_events():
    framer = SSEFramer()
    assert framer.feed(b"data: a\r\n\r\ndata: b") == [b"data: a"]
    assert framer.feed(b"\n\n") == [b"data: b"]


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


async def test_engine_state_survives_slow_health_answers_but_not_a_dead_engine():
    from gateway.config import Settings
    from gateway.engines.errors import EngineTimeout, EngineUnavailable
    from gateway.engines.state import TIMEOUTS_BEFORE_NOT_READY, EngineState

    class Upstream:
        failure: Exception | None = None

        async def request_bytes(self, *args, **kwargs):
            if self.failure:
                raise self.failure
            return 200, b""

        async def get_json(self, *args, **kwargs):
            return {"data": [{"id": "m", "max_model_len": 100, "root": "/m"}]}

    upstream = Upstream()
    engine = EngineState(Settings(), upstream)
    await engine.refresh()
    assert engine.ready and engine.served_models == ["m"] and engine.max_model_len == 100
    upstream.failure = EngineTimeout()
    for _ in range(TIMEOUTS_BEFORE_NOT_READY - 1):
        await engine.refresh()
        assert engine.ready
    await engine.refresh()
    assert not engine.ready
    upstream.failure = None
    await engine.refresh()
    assert engine.ready
    upstream.failure = EngineUnavailable("the inference engine is unreachable (refused)")
    await engine.refresh()
    assert not engine.ready and not engine.reachable
