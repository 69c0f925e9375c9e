"""The store side of sessions: one object between the generations in memory and the shared store.

It owns the store writer (batched persistence of every generation's events), reads events
back (replays after a ring dropped them, sessions produced elsewhere), ends generations
whose producer died (``producer_lost`` + the stream's end, written once by whoever notices),
and keeps the leases that tell replicas someone still follows a session. Feeds and the
manager use it; it uses neither.

Endings it writes for a generation produced elsewhere are in that generation's dialect (the
store records its name): ``dialects`` maps a name to what builds the dialect for an ending
at a given event index (a dialect whose events count themselves, like the Responses API's
``sequence_number``, needs the index); unknown names get the default dialect.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gateway.config import Settings
from gateway.relay.dialect import StreamDialect
from gateway.relay.ending import CANCEL_REQUEST
from gateway.sessions.frames import frames, id_prefix, unframed
from gateway.sessions.generation import Generation
from gateway.sessions.replies import unknown
from gateway.sessions.store.base import DEFAULT_DIALECT, SessionStore, StoredSession
from gateway.sessions.writer import StoreWriter

log = logging.getLogger("gateway.sessions")

PRODUCER_LOST = "the generation was interrupted: the gateway producing it stopped"
# StoredSession.how of a generation ended by someone else after its producer died: what it
# produced after its last persisted batch is unknown.
LOST = "producer_lost"

# (session_id, index of the first ending event) -> the dialect that writes the ending.
EndingDialect = Callable[[str, int], StreamDialect]


class FeedBroken(Exception):
    """The events a client needs cannot be delivered (evicted, expired, replaced)."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class Persistence:
    def __init__(self, store: SessionStore, *, settings: Settings, dialect: StreamDialect,
                 default_model: Callable[[], str], on_written: Callable[[Generation], None],
                 on_fenced: Callable[[Generation], None],
                 dialects: Mapping[str, EndingDialect] | None = None) -> None:
        self.store = store
        self.default_model = default_model
        # The default: endings of generations whose dialect is not registered here.
        self.dialect = dialect
        self._dialects: dict[str, EndingDialect] = {dialect.name: lambda session_id, index: dialect,
                                                    **(dialects or {})}
        self.lease = settings.session_lease_seconds
        self.check_interval = self.lease / 3
        self.listener_lease = self.lease
        self.writer = StoreWriter(store, interval=settings.session_flush_interval, on_written=on_written,
                                  on_fenced=on_fenced, max_held_bytes=settings.session_max_held_bytes)

    async def read_evicted(self, generation: Generation, index: int) -> list[bytes]:
        """Events that left a local ring, read back from the store (never past where its copy stops)."""
        lost_from = generation.log.lost_from
        if lost_from is not None and index >= lost_from:
            raise FeedBroken(f"events from index {index} were not persisted (the session store was unavailable) "
                             "and have left memory", code="events_evicted")
        read = await self.store.read_frames(generation.gen_id, index)
        if lost_from is not None:
            read = read[:lost_from - index]  # (the store's own ending follows: not this log's events)
        if not read:
            raise FeedBroken(f"events from index {index} are no longer available", code="events_evicted")
        return read

    async def load(self, owner: str, session_id: str) -> StoredSession:
        """The stored session (404 when unknown, or another key's)."""
        record = await self.store.load(owner, session_id)
        if record is None:
            raise unknown(session_id)
        return record

    def dialect_for(self, name: str, session_id: str, index: int) -> StreamDialect:
        """The dialect of a stored generation, for events written at ``index``."""
        factory = self._dialects.get(name)
        return factory(session_id, index) if factory is not None else self.dialect

    def is_last(self, record: StoredSession, frame: bytes) -> bool:
        """Whether ``frame`` ends the stored generation's stream."""
        return self.dialect_for(record.dialect, record.session_id, 0).is_last(frame)

    async def end_orphan(self, record: StoredSession) -> None:
        """End a generation whose producer is gone, so its followers get an explicit end."""
        if await self.store.end_orphan(record.gen_id, lambda session_id, index: self.interrupted_ending(
                session_id, index, record.dialect)):
            log.warning("ended a session whose producer is gone",
                        extra={"session_id": record.session_id, "replica": record.replica})

    def interrupted_ending(self, session_id: str, index: int,
                           dialect: str = DEFAULT_DIALECT) -> tuple[str, list[bytes]]:
        events = self.dialect_for(dialect, session_id, index).error_events(PRODUCER_LOST, "producer_lost")
        return LOST, frames(id_prefix(session_id), index, events)

    def produced(self, record: StoredSession) -> int:
        """Events the generation's producer persisted itself: ``record.count``, less the ending
        written for it by someone else when its producer died (``LOST``)."""
        if record.how != LOST:
            return record.count
        _, ending = self.interrupted_ending(record.session_id, 0, record.dialect)
        return record.count - len(ending)

    def lost_ending(self, session_id: str, stored: int, index: int, dialect: str = DEFAULT_DIALECT) -> list[bytes]:
        """For a client that has events the store never received: an explicit end at its next index.

        The producer died between receiving events ``stored..index-1`` (this client got
        them) and persisting them; the client must not wait for events that will never
        come, nor be given an ending at ids it already holds with other content.
        """
        message = (f"{PRODUCER_LOST}; events from index {stored} on were never persisted, "
                   f"so this stream ends after index {index - 1}")
        events = self.dialect_for(dialect, session_id, index).error_events(message, "producer_lost")
        return frames(id_prefix(session_id), index, events)

    def cancelled_ending(self, session_id: str, index: int, dialect: str = DEFAULT_DIALECT, *,
                         read_back: ReadBack | None = None) -> tuple[str, list[bytes]]:
        """``read_back``: the generation's stored events as read by its dialect (:meth:`read_back`): the
        ending reports what it generated, and (a dialect with state: the Responses API's) its response."""
        # (The stream's first event is not at hand here: b"" says it went out, if any did.)
        usage = read_back.usage if read_back is not None else None
        writer = read_back.dialect if read_back is not None and read_back.events == index else \
            self.dialect_for(dialect, session_id, index)
        events = writer.cancelled_events(first_event=b"" if index else None, reason=CANCEL_REQUEST,
                                         run_id=session_id, model=self.default_model(), choices=1, usage=usage)
        return "cancelled", frames(id_prefix(session_id), index, events)

    async def read_back(self, record: StoredSession) -> ReadBack:
        """A stored generation's events read by its dialect's tracker, as its producer reads what it relays:
        what it used (``StreamResult.counted_usage``), and its dialect, which writes the ending after them
        as the producer would have (an ending written elsewhere used to report no tokens generated)."""
        dialect = self.dialect_for(record.dialect, record.session_id, 0)
        tracker = dialect.tracker(relay_usage=False, collect_text=False)
        index = 0
        while not tracker.ended:
            stored = await self.store.read_frames(record.gen_id, index)
            if not stored:
                break
            tracker.accept(b"".join(unframed(framed) for framed in stored))
            index += len(stored)
        return ReadBack(dialect, index, tracker.result().counted_usage())


@dataclass(slots=True)
class ReadBack:
    dialect: StreamDialect  # its state follows the events read (a Responses run: its response, its items)
    events: int             # how many were read
    usage: dict | None
