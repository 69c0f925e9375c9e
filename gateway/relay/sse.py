"""Server-sent events by byte-splitting: no per-chunk JSON unless something must be read.

Engines frame every event as ``data: <json>\\n\\n`` (or ``event: <name>\\ndata: <json>\\n\\n``).
The framer cuts the byte stream at blank lines and hands back whole events (without the
trailing blank line); partial events wait in a buffer for the next read.
"""

from __future__ import annotations

import orjson

SEPARATOR = b"\n\n"
KEEPALIVE_FRAME = b": keep-alive\n\n"
SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # tell nginx-style proxies not to buffer
]


class SSEFramer:
    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        """Whole events completed by ``chunk``, in order."""
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r\n", b"\n")
        data = self._buffer + chunk if self._buffer else chunk
        if SEPARATOR not in data:
            self._buffer = data
            return []
        *events, self._buffer = data.split(SEPARATOR)
        return [event for event in events if event]


def event_data(event: bytes) -> bytes | None:
    """The ``data:`` payload of one event (its last ``data:`` line), or None for a comment."""
    if event.startswith(b"data:"):
        line = event
    else:
        found = event.rfind(b"\ndata:")
        if found < 0:
            return None
        line = event[found + 1:]
    end = line.find(b"\n")
    return line[5:end if end >= 0 else None].strip()


def event_json(event: bytes) -> dict | None:
    """The JSON object of an event's ``data:``, or None (comments, [DONE], non-JSON)."""
    data = event_data(event)
    if not data or data[:1] != b"{":
        return None
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def data_event(payload: dict, *, name: str | None = None) -> bytes:
    """One event (without its blank line): ``[event: name\\n]data: <json>``."""
    body = b"data: " + orjson.dumps(payload)
    return b"event: " + name.encode() + b"\n" + body if name else body
