"""Where a follower's events come from: a generation in this process, or the shared store.

A feed answers one question, ``await next_frames(index)``: every event from ``index`` on
that exists now (waiting until there is at least one), or an empty list once the
generation's last event has been delivered or the client went away (``interrupt``).

- ``LocalFeed`` follows a generation produced here: its ring, falling back to the store
  for events the ring already dropped.
- ``StoreFeed`` follows a generation known only from the store: produced by another
  replica (live, woken by its notifications or by polling), or finished before this
  process started. It keeps a "someone listens" lease on the session so the producing
  replica does not cancel it for lack of clients, and ends a generation whose producer
  died, so nobody waits forever.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from gateway.sessions.generation import Generation
from gateway.sessions.persistence import FeedBroken, Persistence
from gateway.sessions.store.base import StoredSession


class LocalFeed:
    __slots__ = ("generation", "interrupted", "position", "_read_evicted", "_on_close", "__weakref__")

    def __init__(self, generation: Generation, start: int, *,
                 read_evicted: Callable[[Generation, int], Awaitable[list[bytes]]],
                 on_close: Callable[[Generation], None]) -> None:
        self.generation = generation
        self.interrupted = False
        self.position = start  # the ring keeps what this client has not read yet
        self._read_evicted = read_evicted
        self._on_close = on_close
        generation.log.readers.add(self)

    async def next_frames(self, index: int) -> list[bytes]:
        log = self.generation.log
        self.position = index
        while True:
            read = log.read_from(index)
            if read is None:
                return await self._read_evicted(self.generation, index)
            if read or log.ended or self.interrupted:
                return read
            await log.wait()

    def interrupt(self) -> None:
        self.interrupted = True
        self.generation.log.wake()

    def close(self) -> None:
        self.generation.log.release(self)
        self._on_close(self.generation)


class StoreFeed:
    def __init__(self, persistence: Persistence, record: StoredSession, *, checked: bool = False) -> None:
        self.persistence = persistence
        self.store = persistence.store
        self.record = record
        self.done = False
        self.interrupted = False
        self._interrupt = asyncio.get_running_loop().create_future()
        # ``checked``: the caller just looked at the session and renewed the listener lease.
        self._next_check = time.monotonic() + persistence.check_interval if checked else 0.0

    async def next_frames(self, index: int) -> list[bytes]:
        while not (self.done or self.interrupted):
            if time.monotonic() >= self._next_check:
                self._next_check = time.monotonic() + self.persistence.check_interval
                await self._check()
            record = self.record
            read = await self.store.read_frames(record.gen_id, index)
            if read:
                self.done = self.persistence.is_last(record, read[-1])
                return read
            if not record.live:
                self.done = True
                if index > record.count:  # this client got events the store never received
                    return self.persistence.lost_ending(record.session_id, self.persistence.produced(record), index,
                                                        record.dialect)
                return []
            signal = self.store.signal(record.gen_id)
            await asyncio.wait((signal, self._interrupt), timeout=max(0.0, self._next_check - time.monotonic()),
                               return_when=asyncio.FIRST_COMPLETED)
        return []

    async def _check(self) -> None:
        """Still the session's generation? Producer alive? Keep our listener lease fresh."""
        record = self.record
        current = await self.store.load(record.owner, record.session_id)
        if current is None or current.gen_id != record.gen_id:
            raise FeedBroken("this session expired or a new generation replaced it", code="session_replaced")
        if current.live and not current.producer_alive:
            await self.persistence.end_orphan(current)
            current = await self.store.load(record.owner, record.session_id) or current
        self.record = current
        if current.live:
            await self.store.touch_listener(record.gen_id, self.persistence.listener_lease)

    def interrupt(self) -> None:
        self.interrupted = True
        if not self._interrupt.done():
            self._interrupt.set_result(None)

    def close(self) -> None:
        return None
