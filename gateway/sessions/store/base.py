"""What a session store keeps, and the operations the session manager needs from it.

A store persists generations as rows of *chunks*: every flush writes, per
session, one row holding all the frames produced since the last flush, back
to back and compressed (``first_idx``..``last_idx``). So a stream of 512
tokens costs a few dozen small rows, not 512, and a flush of many sessions is
one transaction.

Every live generation records the replica producing it; replicas renew a
heartbeat, so any replica can tell a live producer from a dead one (a
generation whose producer died is ended by whoever notices, with an error
event and ``[DONE]``, in one transaction that only one replica can win).

Each generation records the stream dialect it speaks (``openai``, ``responses``, ...), so
whoever writes its ending (a replica that finds it orphaned) writes it in that dialect.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from gateway.sessions.frames import unpack_frames

LIVE = "live"
ENDED = "ended"
DEFAULT_DIALECT = "openai"  # the dialect of every generation stored before dialects were recorded


@dataclass(slots=True)
class StoredSession:
    owner: str
    session_id: str
    gen_id: int
    status: str            # live | ended
    how: str | None        # completed | cancelled | client_disconnect | error, once ended
    count: int             # events stored so far (all of them once ended)
    named: bool
    replica: str
    producer_alive: bool   # live and its replica's heartbeat is fresh
    dialect: str = DEFAULT_DIALECT

    @property
    def live(self) -> bool:
        return self.status == LIVE


@dataclass(slots=True)
class NewGeneration:
    owner: str
    session_id: str
    gen_id: int
    named: bool
    dialect: str = DEFAULT_DIALECT


@dataclass(slots=True)
class Chunk:
    gen_id: int
    first_idx: int
    last_idx: int
    frames: bytes  # frames.pack_frames() of events first_idx..last_idx


@dataclass(slots=True)
class Ending:
    gen_id: int
    how: str
    count: int


@dataclass(slots=True)
class Batch:
    generations: list[NewGeneration] = field(default_factory=list)
    chunks: list[Chunk] = field(default_factory=list)
    endings: list[Ending] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.generations or self.chunks or self.endings)


# (session_id, first free index) -> (how, frames): the ending a dead producer never wrote.
EndingFactory = Callable[[str, int], tuple[str, list[bytes]]]


class SessionStore(Protocol):
    name: str
    replica: str                 # this process's replica id
    poll_interval: float         # how often a follower looks for new events without a signal
    commits: int                 # write transactions committed (tests check batching)
    on_cancel_request: Callable[[int], None] | None

    async def open(self) -> None: ...
    async def close(self) -> None: ...
    async def claim(self, generation: NewGeneration) -> bool:
        """Make ``generation`` the session's current one, unless another live replica produces it."""
    async def discard(self, gen_id: int) -> None: ...
    async def write(self, batch: Batch) -> set[int]:
        """Persist one batch in one transaction and tell followers on other replicas.

        Returns the generations it refused to write: no longer live in the store, or
        no longer this replica's (another replica ended it as an orphan, or replaced it).
        """
    async def load(self, owner: str, session_id: str) -> StoredSession | None: ...
    async def read_frames(self, gen_id: int, start: int, *, max_chunks: int = 64) -> list[bytes]: ...
    async def end_orphan(self, gen_id: int, make_ending: EndingFactory) -> bool:
        """End a live generation whose producer is gone; False if it is alive or already ended."""
    async def orphans(self) -> list[StoredSession]: ...
    def signal(self, gen_id: int) -> asyncio.Future:
        """A future resolved when ``gen_id`` may have new events (at the latest after ``poll_interval``)."""
    async def request_cancel(self, gen_id: int) -> None: ...
    async def pending_cancels(self) -> list[int]: ...
    async def touch_listener(self, gen_id: int, seconds: float) -> None: ...
    async def has_listener(self, gen_id: int) -> bool: ...
    async def heartbeat(self) -> None: ...
    async def retire(self) -> None: ...
    async def expire(self, ttl_seconds: float) -> int: ...


def split_chunk_rows(rows, start: int) -> list[bytes]:
    """Frames from index ``start`` on, out of (first_idx, packed frames) rows in order; stops at a gap."""
    out: list[bytes] = []
    expected = start
    for first_idx, blob in rows:
        if first_idx > expected:
            break  # never skip over missing events
        frames = unpack_frames(bytes(blob))
        out.extend(frames[expected - first_idx:])
        expected = first_idx + len(frames)
    return out
