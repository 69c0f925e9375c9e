"""Counting SSE events by byte-splitting: what the load generator needs, nothing more.

The load generator shares a core with the fake upstream, so it never JSON-decodes a chunk:
it splits the byte stream on blank lines and classifies each event by a few substring tests
that hold for vLLM's compact JSON and for a relay that re-encodes it with spaces.
"""

from __future__ import annotations

_USAGE_MARKERS = (b'"choices":[]', b'"choices": []')


class SseCounter:
    """Feed raw body bytes; counts content events and notes [DONE] and error events."""

    __slots__ = ("_tail", "content_events", "done", "error_events")

    def __init__(self) -> None:
        self._tail = b""
        self.content_events = 0
        self.done = False
        self.error_events = 0

    def feed(self, data: bytes) -> int:
        """Consume a piece of the body; return how many content events it completed."""
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n")
        events = (self._tail + data).split(b"\n\n")
        self._tail = events.pop()
        before = self.content_events
        for event in events:
            self._classify(event)
        return self.content_events - before

    def _classify(self, event: bytes) -> None:
        start = event.find(b"data:")
        if start < 0:  # a comment (keep-alive) or an id/event line without data
            return
        payload = event[start + 5:].lstrip(b" ")
        if payload.startswith(b"[DONE]"):
            self.done = True
        elif payload.startswith(b'{"error"'):
            self.error_events += 1
        elif b'"role"' in payload:  # the opening chunk announcing the assistant role
            return
        elif _USAGE_MARKERS[0] in payload or _USAGE_MARKERS[1] in payload:
            return
        else:
            self.content_events += 1
