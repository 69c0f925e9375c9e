"""The store writer: one background task persists every generation's new events in batches.

Producers only mark a generation dirty (a dict insert, no I/O, no task). Every
``SESSION_FLUSH_INTERVAL`` seconds while anything is dirty, the writer takes
all dirty generations and writes, in ONE transaction, one chunk row per generation
(all its frames since the last flush, compressed), the rows of generations new to the
store, and the endings of generations that finished. Then it tells the logs
how far they are persisted, which lets their rings drop old events.

When the store fails, nothing is lost: every generation stays dirty and is written by a
later flush (one a second). ``backlog_bytes`` says how much is waiting, so the manager can
refuse new streams before memory grows without bound; the failure is logged once with its
traceback, then once a minute while it lasts, then its recovery.

A traced request's generation gets one ``gateway.session.write`` event per flush that wrote
its events (how many, their bytes, the ending, the transaction's time; docs/tracing.md), never
one per event.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from gateway.sessions.frames import pack
from gateway.sessions.generation import Generation
from gateway.sessions.store.base import Batch, Chunk, Ending, NewGeneration, SessionStore

log = logging.getLogger("gateway.sessions")

RETRY_SECONDS = 1.0
STILL_FAILING_LOG_SECONDS = 60.0


class StoreWriter:
    def __init__(self, store: SessionStore, *, interval: float, on_written: Callable[[Generation], None],
                 on_fenced: Callable[[Generation], None]) -> None:
        self.store = store
        self.interval = interval
        self.on_written = on_written
        self.on_fenced = on_fenced
        self._dirty: dict[int, Generation] = {}
        self._wake = asyncio.Event()
        self._failing = False
        self._failing_since = 0.0
        self._logged_at = 0.0
        self.backlog_bytes = 0  # event bytes the last flush attempt could not persist

    def mark(self, generation: Generation) -> None:
        """``generation`` has events (or an ending) the store does not have yet."""
        dirty = self._dirty
        if generation.gen_id not in dirty:
            dirty[generation.gen_id] = generation
            if len(dirty) == 1:
                self._wake.set()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            # Let a batch gather: a whole interval of events from every generation.
            await asyncio.sleep(RETRY_SECONDS if self._failing else self.interval)
            self._wake.clear()
            await self.flush()

    async def flush(self) -> None:
        """Write everything dirty now (also called once more at shutdown)."""
        dirty, self._dirty = self._dirty, {}
        batch = Batch()
        size = 0
        written: list[tuple[Generation, int, bool]] = []
        traced: list[tuple[object, int, int, bool]] = []  # (the request's trace, events, bytes, ending)
        for generation in dirty.values():
            if generation.replaced:
                continue  # a newer generation owns the session id; its claim removed this one
            if not generation.stored:
                key = generation.key
                batch.generations.append(NewGeneration(key.owner, key.session_id, generation.gen_id, generation.named))
            log_ = generation.log
            start = min(log_.persisted, log_.next_index)
            frames = log_.pending_since(start)
            end = start + len(frames)
            raw = b""
            if frames:
                raw = b"".join(frames)
                size += len(raw)
                batch.chunks.append(Chunk(generation.gen_id, start, end - 1, pack(raw)))
            ending = log_.ended and not generation.ending_stored
            if ending:
                batch.endings.append(Ending(generation.gen_id, generation.how or "error", end))
            written.append((generation, end, ending))
            trace = generation.trace
            if trace is not None:
                traced.append((trace, len(frames), len(raw), ending))
        if not batch:
            return
        started = time.perf_counter()
        try:
            fenced = await self.store.write(batch)
        except BaseException as exc:
            if traced:
                _trace_writes(traced, time.perf_counter() - started, type(exc).__name__)
            # Nothing is lost: the generations stay dirty for the next flush (or the one at shutdown).
            for generation, _, _ in written:
                self.mark(generation)
            if not isinstance(exc, Exception):
                raise
            self.backlog_bytes = size
            now = time.monotonic()
            if not self._failing:
                self._failing, self._failing_since, self._logged_at = True, now, now
                log.exception("session store write failed; retrying", extra={"generations": len(written)})
            elif now - self._logged_at >= STILL_FAILING_LOG_SECONDS:
                self._logged_at = now
                log.error("session store writes still failing", extra={
                    "seconds": round(now - self._failing_since), "backlog_bytes": size, "error": repr(exc)[:200]})
            return
        if traced:
            _trace_writes(traced, time.perf_counter() - started, None)
        if self._failing:
            log.warning("session store writes recovered",
                        extra={"seconds": round(time.monotonic() - self._failing_since)})
        self._failing = False
        self.backlog_bytes = 0
        for generation, end, ending in written:
            generation.stored = True
            generation.log.mark_persisted(end)
            if generation.gen_id in fenced:
                # The store no longer takes this generation's events: stop it here too.
                generation.ending_stored = True
                self.on_fenced(generation)
            elif ending:
                generation.ending_stored = True
                self.on_written(generation)


def _trace_writes(traced: list, seconds: float, error: str | None) -> None:
    """Each traced request's share of one flush (the transaction's time is the whole batch's)."""
    for trace, events, size, ending in traced:
        trace.stored({"gateway.session.events": events, "gateway.session.bytes": size,
                      "gateway.session.ending": ending, "gateway.session.write_ms": round(seconds * 1000, 3)}, error)
