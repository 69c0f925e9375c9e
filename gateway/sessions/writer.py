"""The store writer: one background task persists every generation's new events in batches.

Producers only mark a generation dirty (a dict insert, no I/O, no task). Every
``SESSION_FLUSH_INTERVAL`` seconds while anything is dirty, the writer takes
all dirty generations and writes, in ONE transaction, one chunk row per generation
(all its frames since the last flush, compressed), the rows of generations new to the
store, and the endings of generations that finished. Then it tells the logs
how far they are persisted, which lets their rings drop old events.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from gateway.sessions.frames import pack_frames
from gateway.sessions.generation import Generation
from gateway.sessions.store.base import Batch, Chunk, Ending, NewGeneration, SessionStore

log = logging.getLogger("gateway.sessions")

RETRY_SECONDS = 1.0


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
        written: list[tuple[Generation, int, bool]] = []
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
            if frames:
                batch.chunks.append(Chunk(generation.gen_id, start, end - 1, pack_frames(frames)))
            ending = log_.ended and not generation.ending_stored
            if ending:
                batch.endings.append(Ending(generation.gen_id, generation.how or "error", end))
            written.append((generation, end, ending))
        if not batch:
            return
        try:
            fenced = await self.store.write(batch)
        except BaseException as exc:
            # Nothing is lost: the generations stay dirty for the next flush (or the one at shutdown).
            for generation, _, _ in written:
                self.mark(generation)
            if not isinstance(exc, Exception):
                raise
            if not self._failing:
                log.exception("session store write failed; retrying", extra={"generations": len(written)})
            self._failing = True
            return
        self._failing = False
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
