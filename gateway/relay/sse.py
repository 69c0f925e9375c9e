"""Server-sent events by byte-splitting: no per-chunk JSON unless something must be read.

Engines frame every event as ``data: <json>\\n\\n`` (or ``event: <name>\\ndata: <json>\\n\\n``).
The framer cuts the byte stream after its last blank line and hands back the block of whole
events that one read completed, unsplit (most blocks are relayed as they are: one search for
the last blank line, no per-event work); a partial event waits in a buffer for the next read.
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

    def complete(self, chunk: bytes) -> bytes:
        """The whole events ``chunk`` completed, as one block ending in a blank line (or b"")."""
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r\n", b"\n")
        data = self._buffer + chunk if self._buffer else chunk
        end = data.rfind(SEPARATOR)
        if end < 0:
            self._buffer = data
            return b""
        end += 2
        if end == len(data):
            self._buffer = b""
            return data
        self._buffer = data[end:]
        return data[:end]

    def feed(self, chunk: bytes) -> list[bytes]:
        """Whole events completed by ``chunk``, in order (without their blank lines)."""
        return split_events(self.complete(chunk))


def split_events(block: bytes) -> list[bytes]:
    """A block of whole events -> the events, without their blank lines (empty ones dropped)."""
    if not block:
        return []
    events = block.split(SEPARATOR)
    events.pop()  # after the last blank line: nothing
    return events if all(events) else [event for event in events if event]


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
