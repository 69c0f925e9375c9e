"""A session's run writes into the generation's event log, and from there to its first client.

The session's sink for the runner (``relay.run``): each engine read's events are framed once
(``id: <session_id>:<index>``), appended to the log as one batch (followers and the store
writer read them there) and written, as the same bytes, straight to the client that started
the generation, in the same task: the first client of a session costs no more than a plain
relay. When that client leaves, the sink stops writing to it and the manager decides whether
the generation goes on (``SessionManager._client_left``). The log always ends with the run's
ending; a continuation on another engine reads back what the log holds (from the store for
events that left the ring).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gateway.failures import Failure
from gateway.relay.channel import ClientChannel
from gateway.relay.ending import Ending
from gateway.relay.sse import SEPARATOR, split_events
from gateway.sessions.frames import framed_block, frames
from gateway.sessions.generation import Generation
from gateway.sessions.ids import SESSION_HEADER


@dataclass(slots=True)
class SinkHooks:
    """What the session manager does at a generation's milestones."""

    on_frames: Callable[[Generation], None]             # new frames in the log (the store writer)
    on_refused: Callable[[Generation], Awaitable[None]]  # the engine refused: forget it before answering
    on_end: Callable[[Generation], None]                # the log is closed
    # Events that left the log's ring, read back from the store (to continue a long stream elsewhere).
    read_evicted: Callable[[Generation, int], Awaitable[list[bytes]]] | None = None


class LogSink:
    __slots__ = ("generation", "hooks", "on_frames", "channel")
    counts_events = True  # the log counts its events (they are split anyway): the tracker need not

    def __init__(self, generation: Generation, hooks: SinkHooks) -> None:
        self.generation = generation
        self.hooks = hooks
        self.on_frames = hooks.on_frames  # (called on every engine read: one lookup less)
        self.channel: ClientChannel | None = None

    @property
    def first_event(self) -> bytes | None:
        return self.generation.first_event

    def attach(self, channel: ClientChannel) -> list[tuple[bytes, bytes]]:
        self.channel = channel
        return [(SESSION_HEADER, self.generation.session_id.encode())]

    def detach(self) -> None:
        self.channel = None

    async def write(self, block: bytes) -> None:
        generation = self.generation
        log_ = generation.log
        if block.find(SEPARATOR) == len(block) - 2:  # one event per engine read, the common case: no split
            framed = [framed_block(generation.prefix, log_.next_index, block)]
            body = framed[0]
            if generation.first_event is None:
                generation.first_event = block[:-2]
        else:
            events = split_events(block)
            if generation.first_event is None:
                generation.first_event = events[0]
            framed = frames(generation.prefix, log_.next_index, events)
            body = b"".join(framed)
        log_.append(framed)
        self.on_frames(generation)
        channel = self.channel
        if channel is not None:
            await channel.write(body)

    async def finish(self, ending: Ending) -> int:
        generation = self.generation
        logged = generation.log.next_index  # the engine's events (and what replaced them on another engine)
        framed = frames(generation.prefix, logged, ending.events)
        generation.ended(ending.how, framed)
        self.hooks.on_frames(generation)
        self.hooks.on_end(generation)
        if self.channel is not None:
            await self.channel.close(b"".join(framed))
        return logged

    async def refused(self, error: Failure) -> None:
        generation = self.generation
        await self.hooks.on_refused(generation)
        # A follower may have attached meanwhile (a resume of a named session): end its stream too.
        generation.ended("error", frames(generation.prefix, 0, generation.dialect.error_events(
            error.message, error.code or "upstream_error")))
        self.hooks.on_end(generation)

    async def delivered(self) -> list[bytes]:
        """Every event in the generation's log so far (from the store for those that left the ring)."""
        generation = self.generation
        log_ = generation.log
        earlier: list[bytes] = []
        while len(earlier) < log_.base:
            if self.hooks.read_evicted is None:
                raise RuntimeError("events left the ring and there is no store")
            batch = await self.hooks.read_evicted(generation, len(earlier))
            if not batch:
                raise RuntimeError(f"events from index {len(earlier)} are gone")
            earlier.extend(batch)
        return earlier[:log_.base] + log_.frames
