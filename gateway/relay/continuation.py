"""A stream that survives its engine, the relay's part: what a protocol supplies to produce it again elsewhere.

When an engine dies or stalls in the middle of a resumable stream, the runner
(``relay.switch``) asks the stream's :class:`Continuation` (supplied by its protocol,
which knows what its events mean) for a :class:`Replay`: an engine request that produces the
same stream again, and a filter for that request's events that drops what clients already
have (every event in the session's log) and restyles the rest as the original stream's own.
The filtered events go through the same loop (``relay.pump``) into the same log, so clients
see one stream: same session, contiguous indices, no repeated or missing text.

A replay is exact only when the engine reproduces the run: the protocol offers one only for
requests whose sampling is deterministic (greedy, or seeded) and checks, while skipping, that
the new engine produces exactly what clients already have. When it does not
(:class:`ContinuationDiverged`: on the vLLM CPU engine a prefix-cache hit alone can change a
greedy answer), the runner asks for the second way, :meth:`Continuation.extend`: a request
that goes on from exactly what clients received (the prompt plus the partial answer), so the
stream still has no repeated or missing text, though its rest is no longer the uninterrupted
run's (a protocol whose engine route cannot go on from a partial answer offers none). Only
when that is impossible too does the stream end with an explicit error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from gateway.engines.client import EngineClient
from gateway.engines.routing import RouteHints
from gateway.failures import UpstreamFailed
from gateway.http.context import RequestContext
from gateway.relay.dialect import StreamResult, StreamTracker


class ContinuationDiverged(UpstreamFailed):
    def __init__(self, message: str) -> None:
        super().__init__(f"the stream could not be continued exactly on another engine: {message}",
                         code="continuation_diverged")


class ReplayFilter(Protocol):
    def __call__(self, block: bytes) -> bytes:
        """The events of ``block`` (the new engine's, whole events) clients do not have yet, as the
        stream's own (b"" for none). Raises ``ContinuationDiverged``."""


@dataclass(slots=True)
class Replay:
    path: str            # the engine route that produces the stream again
    body: bytes
    filter: ReplayFilter


class Continuation(Protocol):
    def replay(self, delivered: list[bytes]) -> Replay | None:
        """How to continue, given every event delivered so far (framed, with ids, in order);
        None when this stream cannot be continued exactly."""

    async def extend(self, delivered: list[bytes], *, engines: EngineClient, route: RouteHints,
                     request: RequestContext) -> Replay | None:
        """How to go on from exactly what was delivered (after a replay diverged); None when the
        stream cannot be continued that way either. May ask the engines (``route``) first; raises
        their ``EngineError`` when they fail."""


class ReplayTracker:
    """The stream's tracker, fed only what the replay filter keeps (usage, ending, text stay right)."""

    __slots__ = ("tracker", "filter")

    def __init__(self, tracker: StreamTracker, filter: ReplayFilter) -> None:
        self.tracker = tracker
        self.filter = filter

    @property
    def ended(self) -> bool:
        return self.tracker.ended

    def accept(self, block: bytes) -> bytes:
        kept = self.filter(block)
        return self.tracker.accept(kept) if kept else b""

    def result(self) -> StreamResult:
        return self.tracker.result()
