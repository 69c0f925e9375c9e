"""Where a client's events come from: a generation in this process, or the shared store.

A feed answers one question, ``await next_frames(index)``: every event from
``index`` on that exists now (waiting until there is at least one), or an
empty list once the generation's ``[DONE]`` has been delivered or the client
went away (``interrupt``).

- ``LocalFeed`` follows a generation produced here: its ring, falling back to
  the store for events the ring already dropped.
- ``StoreFeed`` follows a generation known only from the store: produced by
  another replica (live, woken by its notifications or by polling), or
  finished before this process started. It keeps a "someone listens" lease on
  the session so the producing replica does not cancel it for lack of
  clients, and ends a generation whose producer died, so nobody waits forever.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from gateway.sse import DONE
from gateway.streams.session import Session
from gateway.streams.store.base import StoredSession

if TYPE_CHECKING:
    from gateway.streams.manager import SessionManager

DONE_TAIL = DONE + b"\n\n"


class FeedBroken(Exception):
    """The events a client needs cannot be delivered (evicted, expired, replaced)."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class LocalFeed:
    __slots__ = ("manager", "session", "interrupted", "position", "__weakref__")

    def __init__(self, manager: "SessionManager", session: Session, start: int) -> None:
        self.manager = manager
        self.session = session
        self.interrupted = False
        self.position = start  # the ring keeps what this client has not read yet
        session.log.readers.add(self)

    async def next_frames(self, index: int) -> list[bytes]:
        log = self.session.log
        self.position = index
        while True:
            frames = log.read_from(index)
            if frames is None:
                return await self.manager.read_evicted(self.session, index)
            if frames or log.ended or self.interrupted:
                return frames
            await log.wait()

    def interrupt(self) -> None:
        self.interrupted = True
        self.session.log.wake()

    def close(self) -> None:
        self.session.log.release(self)
        self.manager.consumer_left(self.session)


class StoreFeed:
    def __init__(self, manager: "SessionManager", record: StoredSession, *, checked: bool = False) -> None:
        self.manager = manager
        self.store = manager.store
        self.record = record
        self.done = False
        self.interrupted = False
        self._interrupt = asyncio.get_running_loop().create_future()
        # ``checked``: the caller just looked at the session and renewed the listener lease.
        self._next_check = time.monotonic() + manager.check_interval if checked else 0.0

    async def next_frames(self, index: int) -> list[bytes]:
        record = self.record
        while not (self.done or self.interrupted):
            now = time.monotonic()
            if now >= self._next_check and not self.done:
                self._next_check = now + self.manager.check_interval
                await self._check()
            frames = await self.store.read_frames(record.gen_id, index)
            if frames:
                self.done = frames[-1].endswith(DONE_TAIL)
                return frames
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
        if not current.live:
            return
        if not current.producer_alive:
            await self.manager.end_orphan(current)
            return
        await self.store.touch_listener(record.gen_id, self.manager.listener_lease)

    def interrupt(self) -> None:
        self.interrupted = True
        if not self._interrupt.done():
            self._interrupt.set_result(None)

    def close(self) -> None:
        return None
