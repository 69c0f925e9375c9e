"""SSE framing by byte-splitting: the same events however the engine's bytes are cut."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.relay.sse import SSEFramer

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
