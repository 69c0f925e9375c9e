"""The store writer: one background task persists every generation's new events in batches.

Producers only mark a generation dirty (a dict insert, no I/O, no task). Every
``SESSION_FLUSH_INTERVAL`` seconds while anything is dirty, the writer takes
all dirty generations and writes, in ONE transaction, one chunk row per generation
(all its frames since the last flush, compressed), the rows of generations new to the
store, and the endings of generations that finished. Then it tells the logs
how far they are persisted, which lets their rings drop old events.

The writer is never on a client's path: every reader of a live generation is fed from its
log in memory, so a store that fails or hangs delays persistence only. When the store fails:

- the generations stay dirty and the next flush writes them again, after a backoff that
  doubles from ``RETRY_FIRST_SECONDS`` to ``RETRY_MAX_SECONDS`` (one attempt every 5 s at
  most while the outage lasts; the first success goes back to ``interval``). What an attempt
  packed is kept for the next: a retry packs only the events that came since, so its cost on
  the event loop (which every live client shares) does not grow with the backlog;
- ``backlog_bytes`` says how much is waiting, so the manager refuses new streams beyond
  ``SESSION_MAX_UNPERSISTED_BYTES`` (503) before memory grows;
- the events held for the store are bounded (``max_held_bytes``, ``SESSION_MAX_HELD_BYTES``):
  streams already running keep adding to them, and past the bound the writer gives up on the
  generations holding the most (``EventLog.stop_persisting``) until the rest fits. Their
  clients miss nothing (memory feeds them); once the store answers it gets, for each, one
  error event (``session_events_not_persisted``) where its copy stops, and the generation's
  end, so a resume from the store ends explicitly instead of waiting for events that will
  never come;
- the failure is logged once with its traceback, then once a minute while it lasts, then
  its recovery.

A traced request's generation gets one ``gateway.session.write`` event per flush that wrote
its events (how many, their bytes, the ending, the transaction's time; docs/tracing.md), never
one per event.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from gateway.sessions.frames import frames as framed
from gateway.sessions.frames import pack
from gateway.sessions.generation import Generation
from gateway.sessions.store.base import Batch, Chunk, Ending, NewGeneration, SessionStore

log = logging.getLogger("gateway.sessions")

RETRY_FIRST_SECONDS = 0.25
RETRY_MAX_SECONDS = 5.0
STILL_FAILING_LOG_SECONDS = 60.0
NOT_PERSISTED = "session_events_not_persisted"


class StoreWriter:
    def __init__(self, store: SessionStore, *, interval: float, on_written: Callable[[Generation], None],
                 on_fenced: Callable[[Generation], None], max_held_bytes: int = 256 * 1024 * 1024) -> None:
        self.store = store
        self.interval = interval
        self.max_held_bytes = max_held_bytes
        self.retry_delay = 0.0  # while the store fails: the wait before the next attempt (backoff)
        self.gave_up = 0  # generations whose events past some index the store will never get
        self.on_written = on_written
        self.on_fenced = on_fenced
        self._dirty: dict[int, Generation] = {}
        # Per generation, what failed attempts packed already: (chunks, their raw bytes). A retry
        # packs only the events that came since, so its cost on the event loop stays that of one
        # interval's events, however long the outage (re-packing 30,000 events took ~60 ms).
        self._packed: dict[int, tuple[list[Chunk], int]] = {}
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
            # Let a batch gather: a whole interval of events from every generation (longer while failing).
            await asyncio.sleep(self.retry_delay or self.interval)
            self._wake.clear()
            await self.flush()

    async def flush(self) -> None:
        """Write everything dirty now (also called once more at shutdown)."""
        dirty, self._dirty = self._dirty, {}
        batch = Batch()
        size = 0
        # (generation, index persisted once written or None for one given up on, ending, its bytes)
        written: list[tuple[Generation, int | None, bool, int]] = []
        traced: list[tuple[object, int, int, bool]] = []  # (the request's trace, events, bytes, ending)
        for generation in dirty.values():
            if generation.replaced:
                self._packed.pop(generation.gen_id, None)
                continue  # a newer generation owns the session id; its claim removed this one
            log_ = generation.log
            if log_.lost_from is not None and generation.ending_stored:
                continue  # given up on, and its store copy is ended already
            if not generation.stored:
                key = generation.key
                batch.generations.append(NewGeneration(key.owner, key.session_id, generation.gen_id, generation.named))
            if log_.lost_from is not None:
                # Given up on: the store gets an explicit error ending where its copy stops.
                at = log_.lost_from
                ending_frames = framed(generation.prefix, at, generation.dialect.error_events(
                    f"events from index {at} on were not persisted: the session store was unavailable "
                    f"for longer than its held events could wait (SESSION_MAX_HELD_BYTES)", NOT_PERSISTED))
                batch.chunks.append(Chunk(generation.gen_id, at, at + len(ending_frames) - 1,
                                          pack(b"".join(ending_frames))))
                batch.endings.append(Ending(generation.gen_id, "error", at + len(ending_frames)))
                written.append((generation, None, True, 0))
                continue
            packed, held = self._packed.get(generation.gen_id, ((), 0))
            start = packed[-1].last_idx + 1 if packed else min(log_.persisted, log_.next_index)
            frames = log_.pending_since(start)
            end = start + len(frames)
            raw = b""
            if frames:
                raw = b"".join(frames)
                packed = [*packed, Chunk(generation.gen_id, start, end - 1, pack(raw))]
                held += len(raw)
            size += held
            batch.chunks.extend(packed)
            ending = log_.ended and not generation.ending_stored
            if ending:
                batch.endings.append(Ending(generation.gen_id, generation.how or "error", end))
            written.append((generation, end, ending, held))
            if packed:
                self._packed[generation.gen_id] = (list(packed), held)
            trace = generation.trace
            if trace is not None:
                carried = end - packed[0].first_idx if packed else 0  # (a retry: earlier attempts' events too)
                traced.append((trace, carried, held, ending))
        if not batch:
            return
        started = time.perf_counter()
        try:
            fenced = await self.store.write(batch)
        except BaseException as exc:
            if traced:
                _trace_writes(traced, time.perf_counter() - started, type(exc).__name__)
            # Nothing is lost: the generations stay dirty for the next flush (or the one at shutdown).
            for generation, _, _, _ in written:
                self.mark(generation)
            if not isinstance(exc, Exception):
                raise
            self.retry_delay = min(RETRY_MAX_SECONDS, max(RETRY_FIRST_SECONDS, self.retry_delay * 2))
            if size > self.max_held_bytes:
                self._give_up(written, size)
            self.backlog_bytes = max(size, self.backlog_bytes)  # (what was given up on is missing too)
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
        self.retry_delay = 0.0
        self.backlog_bytes = 0
        for generation, end, ending, _ in written:
            self._packed.pop(generation.gen_id, None)
            generation.stored = True
            if end is None:  # given up on: its store copy now ends where it stops
                generation.ending_stored = True
                if not generation.live:
                    self.on_written(generation)
                continue
            generation.log.mark_persisted(end)
            if generation.gen_id in fenced:
                # The store no longer takes this generation's events: stop it here too.
                generation.ending_stored = True
                self.on_fenced(generation)
            elif ending:
                generation.ending_stored = True
                self.on_written(generation)

    def _give_up(self, written: list[tuple[Generation, int | None, bool, int]], size: int) -> None:
        """Past ``max_held_bytes``: stop persisting the generations holding the most until the rest fits."""
        given_up = []
        for generation, _, _, held in sorted(written, key=lambda entry: entry[3], reverse=True):
            if size <= self.max_held_bytes or not held:
                break
            size -= held
            self._packed.pop(generation.gen_id, None)
            given_up.append((generation.session_id, generation.log.stop_persisting()))
        self.gave_up += len(given_up)
        log.error("session store unavailable too long: gave up persisting sessions' events past the held bound",
                  extra={"sessions": given_up[:20], "max_held_bytes": self.max_held_bytes})


def _trace_writes(traced: list, seconds: float, error: str | None) -> None:
    """Each traced request's share of one flush (the transaction's time is the whole batch's)."""
    for trace, events, size, ending in traced:
        trace.stored({"gateway.session.events": events, "gateway.session.bytes": size,
                      "gateway.session.ending": ending, "gateway.session.write_ms": round(seconds * 1000, 3)}, error)
