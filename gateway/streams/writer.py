"""The store writer: one background task persists every session's new events in batches.

Producers only mark a session dirty (a dict insert, no I/O, no task). Every
``SESSION_FLUSH_INTERVAL`` seconds while anything is dirty, the writer takes
all dirty sessions and writes, in ONE transaction, one chunk row per session
(all its frames since the last flush, compressed), the rows of generations new to the
store, and the endings of generations that finished. Then it tells the logs
how far they are persisted, which lets their rings drop old events.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from gateway.streams.frames import pack_frames
from gateway.streams.session import Session
from gateway.streams.store.base import Batch, Chunk, Ending, NewGeneration, SessionStore

log = logging.getLogger("gateway.streams")

RETRY_SECONDS = 1.0


class StoreWriter:
    def __init__(self, store: SessionStore, *, interval: float, on_written: Callable[[Session], None],
                 on_fenced: Callable[[Session], None]) -> None:
        self.store = store
        self.interval = interval
        self.on_written = on_written
        self.on_fenced = on_fenced
        self.flushes = 0
        self.flush_seconds = 0.0
        self._dirty: dict[int, Session] = {}
        self._wake = asyncio.Event()
        self._failing = False

    def mark(self, session: Session) -> None:
        """``session`` has events (or an ending) the store does not have yet."""
        dirty = self._dirty
        if session.gen_id not in dirty:
            dirty[session.gen_id] = session
            if len(dirty) == 1:
                self._wake.set()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            # Let a batch gather: a whole interval of events from every session.
            await asyncio.sleep(RETRY_SECONDS if self._failing else self.interval)
            self._wake.clear()
            await self.flush()

    async def flush(self) -> None:
        """Write everything dirty now (also called once more at shutdown)."""
        dirty, self._dirty = self._dirty, {}
        batch = Batch()
        written: list[tuple[Session, int, bool]] = []
        for session in dirty.values():
            if session.replaced:
                continue  # a newer generation owns the session id; its claim removed this one
            if not session.stored:
                key = session.key
                batch.generations.append(NewGeneration(key.owner, key.session_id, session.gen_id, session.named))
            log_ = session.log
            start = min(log_.persisted, log_.next_index)
            frames = log_.pending_since(start)
            end = start + len(frames)
            if frames:
                batch.chunks.append(Chunk(session.gen_id, start, end - 1, pack_frames(frames)))
            ending = log_.ended and not session.ending_stored
            if ending:
                batch.endings.append(Ending(session.gen_id, session.how or "error", end))
            written.append((session, end, ending))
        if not batch:
            return
        started = time.perf_counter()
        try:
            fenced = await self.store.write(batch)
        except BaseException as exc:
            # Nothing is lost: the sessions stay dirty for the next flush (or the one at shutdown).
            for session, _, _ in written:
                self.mark(session)
            if not isinstance(exc, Exception):
                raise
            if not self._failing:
                log.exception("session store write failed; retrying", extra={"sessions": len(written)})
            self._failing = True
            return
        self._failing = False
        self.flushes += 1
        self.flush_seconds += time.perf_counter() - started
        for session, end, ending in written:
            session.stored = True
            session.log.mark_persisted(end)
            if session.gen_id in fenced:
                # The store no longer takes this generation's events: stop it here too.
                session.ending_stored = True
                self.on_fenced(session)
            elif ending:
                session.ending_stored = True
                self.on_written(session)
