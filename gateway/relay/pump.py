"""The one streaming loop: engine bytes -> blocks of whole events -> the dialect's tracker -> a sink.

Both ways a stream reaches clients use it: straight to one client (``relay.plain``), or
into a session's event log that any number of clients follow (``sessions.producer``),
whose first client is written to from this same loop, without another task in between.
Everything one engine read completed goes to the sink in one call, so a sink writes one
body per read, not one per event; in the common case (content events only) the block the
engine sent is relayed as it is.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from gateway.engines.stream import EngineStream
from gateway.http.errors import GatewayError
from gateway.http.metrics import Metrics
from gateway.relay.dialect import StreamResult, StreamTracker
from gateway.relay.sse import SEPARATOR, SSEFramer

log = logging.getLogger("gateway.relay")

CompletionHook = Callable[[StreamResult], Awaitable[None]]


class Sink(Protocol):
    async def write(self, block: bytes) -> None:
        """Take the whole events one engine read completed (one block ending in a blank line)."""


async def pump(stream: EngineStream, tracker: StreamTracker, sink: Sink) -> GatewayError | None:
    """Relay until the protocol's terminal event (``tracker.ended``) or the engine stops.

    Returns the failure that broke the stream, if any. A stream that stopped without its
    terminal event and without a failure ended early: the caller checks ``tracker.ended``.
    """
    complete = SSEFramer().complete
    accept = tracker.accept
    write = sink.write
    read = stream.readany
    try:
        while chunk := await read():
            block = complete(chunk)
            if not block:
                continue
            block = accept(block)
            if block:
                await write(block)
            if tracker.ended:
                await stream.reach_end()  # (so its connection serves the next request)
                return None
    except GatewayError as failure:
        return failure
    except stream.errors as exc:
        return stream.failure(exc)
    return None


def joined(events: list[bytes]) -> bytes:
    """Events as one SSE body."""
    return SEPARATOR.join(events) + SEPARATOR


async def settle(result: StreamResult, *, metrics: Metrics, key_id: str, on_complete: CompletionHook | None,
                 context: dict | None = None) -> None:
    """Account for a finished stream (how it ended, tokens per key) and run the caller's hook."""
    metrics.stream_ended(result.how)
    metrics.count_usage(key_id, result.counted_usage())
    if on_complete is not None:
        try:
            await on_complete(result)
        except Exception:
            log.exception("stream completion hook failed", extra=context or {})
