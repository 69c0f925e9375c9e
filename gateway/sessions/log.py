"""The event log of one generation: framed events in order, the newest in a memory ring.

One producer appends whole batches (everything one upstream read completed);
any number of consumers read "everything from my position on" and, when
caught up, all wait on the same future, which the next batch resolves. So a
batch costs one wake-up per consumer, whatever its number of events.

The ring keeps at least ``ring_size`` of the newest events. Older ones are
dropped only once they are persisted (``mark_persisted``) and every attached
reader is past them (a client that reads slower than the engine writes is
never cut off; the generation's length bounds what it holds). A reader
asking for a dropped index gets ``None`` and must read the store (or 410).

When the store has been failing long enough that the events held for it pass their bound
(``SESSION_MAX_HELD_BYTES``), the writer gives up on persisting a log (``stop_persisting``):
from then on it is trimmed like a memory-only log, and ``lost_from`` says where the store's
copy stops.
"""

from __future__ import annotations

import asyncio

UNBOUNDED = 1 << 62


class EventLog:
    __slots__ = ("frames", "base", "ended", "persisted", "lost_from", "ring_size", "readers", "_slack", "_waiter")

    def __init__(self, ring_size: int, *, persistent: bool) -> None:
        self.frames: list[bytes] = []
        self.base = 0  # index of frames[0]
        self.ended = False
        # Without a store nothing waits to be written: every event may leave the ring.
        self.persisted = 0 if persistent else UNBOUNDED
        self.lost_from: int | None = None  # set when the store will never get the events from here on
        self.ring_size = ring_size
        self.readers: set = set()  # attached readers, each with a ``position`` (next index it reads)
        self._slack = max(16, ring_size // 8)  # trim in steps, not on every append
        self._waiter: asyncio.Future | None = None

    @property
    def next_index(self) -> int:
        return self.base + len(self.frames)

    @property
    def unpersisted(self) -> int:
        return max(0, self.next_index - max(self.persisted, self.base))

    def append(self, frames: list[bytes]) -> None:
        self.frames.extend(frames)
        if len(self.frames) > self.ring_size + self._slack:
            self._trim()
        if self._waiter is not None:
            self.wake()

    def finish(self, frames: list[bytes]) -> None:
        """Append the ending (always ends with ``[DONE]``) and close the log."""
        self.ended = True
        self.append(frames)

    def read_from(self, index: int) -> list[bytes] | None:
        """Events from ``index`` on (empty when caught up), or None if they left the ring."""
        if index < self.base:
            return None
        return self.frames[index - self.base:]

    def pending_since(self, index: int) -> list[bytes]:
        """Events from ``index`` on, for the store writer (they never leave before being written)."""
        return self.frames[max(index, self.base) - self.base:]

    def mark_persisted(self, index: int) -> None:
        self.persisted = index
        if len(self.frames) > self.ring_size + self._slack:
            self._trim()

    def stop_persisting(self) -> int:
        """The store will not get the events not yet persisted: let them leave the ring like any
        other (attached readers keep what they have not read); returns where the store's copy stops."""
        if self.lost_from is None:
            self.lost_from = min(self.persisted, self.next_index)
            self.persisted = UNBOUNDED
            if len(self.frames) > self.ring_size:
                self._trim()
        return self.lost_from

    def release(self, reader) -> None:
        """A reader left: what only it still needed may leave the ring now."""
        self.readers.discard(reader)
        if len(self.frames) > self.ring_size:
            self._trim()

    def wait(self) -> asyncio.Future:
        """A future resolved by the next append (or ``wake``); shared by every waiting reader."""
        if self._waiter is None:
            self._waiter = asyncio.get_running_loop().create_future()
        return self._waiter

    def wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def _trim(self) -> None:
        keep_from = self.persisted
        for reader in self.readers:
            if reader.position < keep_from:
                keep_from = reader.position
        drop = min(len(self.frames) - self.ring_size, keep_from - self.base)
        if drop > 0:
            del self.frames[:drop]
            self.base += drop
