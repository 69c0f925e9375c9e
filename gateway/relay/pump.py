"""The one streaming loop: engine bytes -> blocks of whole events -> the dialect's tracker -> a sink.

Every run uses it (``relay.run``), whatever its sink: one client, or a session's event log
that any number of clients follow and whose first client is written to from this same loop,
without another task in between. Everything one engine read completed goes to the sink in
one call, so a sink writes one body per read, not one per event; in the common case
(content events only) the block the engine sent is relayed as it is.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from gateway.engines.stream import EngineStream
from gateway.failures import Failure
from gateway.relay.dialect import StreamTracker
from gateway.relay.sse import SEPARATOR, SSEFramer


class Sink(Protocol):
    async def write(self, block: bytes) -> None:
        """Take the whole events one engine read completed (one block ending in a blank line)."""


async def pump(stream: EngineStream, tracker: StreamTracker, sink: Sink,
               before_end: Callable[[], Awaitable[None]] | None = None) -> Failure | None:
    """Relay until the protocol's terminal event (``tracker.ended``) or the engine stops.

    ``before_end`` runs once the terminal event was read, before the block holding it is written.
    Returns the failure that broke the stream, if any. A stream that stopped without its
    terminal event and without a failure ended early: the caller checks ``tracker.ended``.
    """
    complete = SSEFramer().complete
    accept = tracker.accept
    write = sink.write
    read = stream.readany
    fit = getattr(sink, "fit", None)  # a metered sink: the events its budgets cover, before the tracker reads them
    try:
        while chunk := await read():
            block = complete(chunk)
            if not block:
                continue
            if fit is not None:
                fitted = fit(block)
                block = fitted if fitted.__class__ is bytes else await fitted
            block = accept(block)
            if tracker.ended:
                if before_end is not None:
                    await before_end()
                if block:
                    await write(block)
                await stream.reach_end()  # (so its connection serves the next request)
                return None
            if block or fit is not None:  # (a metered sink's write of a read cut short ends the stream)
                await write(block)
    except Failure as failure:
        return failure
    except stream.errors as exc:
        return stream.failure(exc)
    return None


def joined(events: list[bytes]) -> bytes:
    """Events as one SSE body."""
    return SEPARATOR.join(events) + SEPARATOR if events else b""
