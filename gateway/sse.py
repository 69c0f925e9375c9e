"""Server-sent events by byte-splitting: no per-chunk JSON unless something must be read.

The engine frames every event as ``data: <json>\\n\\n``. The framer cuts the
byte stream at blank lines and hands back whole events (without the trailing
blank line); partial events wait in a buffer for the next read.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson

DONE = b"data: [DONE]"
DONE_FRAME = b"data: [DONE]\n\n"
KEEPALIVE_FRAME = b": keep-alive\n\n"
SEPARATOR = b"\n\n"


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

    @property
    def pending(self) -> bytes:
        """Bytes of an event that never completed (the engine stopped mid-event)."""
        return self._buffer


class KeepAlive:
    """A ``: keep-alive`` comment when a whole tick passed with nothing sent.

    The stream adds to ``sent`` after each body it sends (a plain attribute, the
    per-chunk cost of an integer add); the DisconnectWatcher calls ``tick`` every
    keep-alive interval, so proxies never see a silence longer than two intervals.
    """

    __slots__ = ("_send", "sent", "_seen")

    def __init__(self, send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        self._send = send
        self.sent = 0
        self._seen = -1

    async def tick(self) -> None:
        if self.sent == self._seen:  # nothing sent since the last tick
            await self._send({"type": "http.response.body", "body": KEEPALIVE_FRAME, "more_body": True})
        self._seen = self.sent


def event_json(event: bytes) -> dict | None:
    """The JSON of a ``data:`` event, or None (comments, [DONE], non-JSON)."""
    if not event.startswith(b"data:") or event.startswith(DONE):
        return None
    try:
        value = orjson.loads(event[5:])
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def error_frame(message: str, *, type: str = "upstream_error", code: str | None = None, event_id: bytes | None = None) -> bytes:
    """An OpenAI-style error event, for failures after the stream has started."""
    body = orjson.dumps({"error": {"message": message, "type": type, "param": None, "code": code}})
    prefix = b"id: " + event_id + b"\n" if event_id is not None else b""
    return prefix + b"data: " + body + SEPARATOR
