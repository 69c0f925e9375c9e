"""The SQLite session store (aiosqlite): the embedded default.

WAL journal, ``synchronous=NORMAL``: a commit is an append to the WAL, and a
flush of many sessions is one commit. Writes go through one connection under
a lock (SQLite has one writer anyway); replays read through a second one, so
a long replay never waits on the writer. Every write transaction is ``BEGIN IMMEDIATE``
(see ``_transaction``): the file is shared with the gateway's other tables (the usage ledger,
batches, stored responses), whose writers would otherwise fail our flushes at once with
"database is locked". Several gateway processes may share
the file: a follower in another process polls for new events every
``poll_interval`` seconds, and cancel requests travel through a flag the
producing process polls.
(Stored responses, the Responses API's, live in the same file, in a table of their own:
``protocols.responses.records``.)
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from pathlib import Path

import aiosqlite

from gateway.config import sqlite_database
from gateway.sessions.frames import pack_frames
from gateway.sessions.store.base import (
    LIVE,
    Batch,
    EndingFactory,
    NewGeneration,
    StoredSession,
    split_chunk_rows,
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS stream_sessions (
    owner TEXT NOT NULL,
    session_id TEXT NOT NULL,
    gen_id INTEGER NOT NULL UNIQUE,
    status TEXT NOT NULL,
    how TEXT,
    count INTEGER NOT NULL DEFAULT 0,
    named INTEGER NOT NULL,
    replica TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    listener_until REAL NOT NULL DEFAULT 0,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    dialect TEXT NOT NULL DEFAULT 'openai',
    PRIMARY KEY (owner, session_id)
);
CREATE INDEX IF NOT EXISTS stream_sessions_by_status ON stream_sessions (status, updated_at);
CREATE INDEX IF NOT EXISTS stream_sessions_by_replica ON stream_sessions (replica, status);
CREATE TABLE IF NOT EXISTS stream_chunks (
    gen_id INTEGER NOT NULL,
    first_idx INTEGER NOT NULL,
    last_idx INTEGER NOT NULL,
    frames BLOB NOT NULL,
    PRIMARY KEY (gen_id, first_idx)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS stream_replicas (
    replica TEXT PRIMARY KEY,
    heartbeat_at REAL NOT NULL
);
"""
# Columns added after the first release: a database created before them gets them at open.
ADDED_COLUMNS = (("stream_sessions", "dialect", "TEXT NOT NULL DEFAULT 'openai'"),)

_SESSION_COLUMNS = """
    s.owner, s.session_id, s.gen_id, s.status, s.how, s.named, s.replica, r.heartbeat_at, s.dialect,
    CASE WHEN s.status = 'ended' THEN s.count
         ELSE COALESCE((SELECT MAX(c.last_idx) + 1 FROM stream_chunks c WHERE c.gen_id = s.gen_id), 0) END
    FROM stream_sessions s LEFT JOIN stream_replicas r ON r.replica = s.replica
"""

# A new generation of the session replaces the row; the same generation written again (the
# writer's first flush of a claimed, named one) changes nothing: resetting it wiped a follower's
# listener lease taken meanwhile on another replica (and a cancel asked meanwhile), and the
# producer then stopped a generation that was being followed.
_UPSERT_GENERATION = """
INSERT INTO stream_sessions (owner, session_id, gen_id, status, named, dialect, replica, created_at, updated_at)
VALUES (?, ?, ?, 'live', ?, ?, ?, ?, ?)
ON CONFLICT (owner, session_id) DO UPDATE SET
    gen_id = excluded.gen_id, status = 'live', how = NULL, count = 0, named = excluded.named,
    dialect = excluded.dialect, replica = excluded.replica, created_at = excluded.created_at,
    updated_at = excluded.updated_at, listener_until = 0, cancel_requested = 0
    WHERE stream_sessions.gen_id <> excluded.gen_id
"""


def sqlite_path(url: str) -> str:
    """The file of a ``sqlite:///path`` or ``sqlite+aiosqlite:///path`` URL."""
    path = sqlite_database(url)
    if path is None:
        if url.partition(":")[0].startswith("sqlite"):
            raise ValueError("the sessions SQLite database must be a file (not :memory:): "
                             "other connections must see it")
        raise ValueError(f"SESSION_STORE=sqlite needs a sqlite:/// URL in SESSIONS_DATABASE_URL or DATABASE_URL, "
                         f"got {url.partition(':')[0] or url!r}")
    return path


class SQLiteStore:
    name = "sqlite"

    def __init__(self, url: str, *, replica: str, lease_seconds: float, poll_interval: float,
                 busy_timeout_seconds: float = 10.0) -> None:
        self.path = sqlite_path(url)
        # How long a statement waits for another connection's write lock. Below the store's call
        # bound (``make_store``): a statement still waiting in aiosqlite's thread after its caller
        # gave up would hold this store's writer (and the ROLLBACK queued behind it) that much longer.
        self.busy_timeout_ms = max(1, int(busy_timeout_seconds * 1000))
        self.replica = replica
        self.lease_seconds = lease_seconds
        self.poll_interval = poll_interval
        self.commits = 0
        self.on_cancel_request = None  # cancel requests are polled (pending_cancels)
        self._writer: aiosqlite.Connection | None = None
        self._reader: aiosqlite.Connection | None = None
        self._lock = asyncio.Lock()

    async def open(self) -> None:
        await asyncio.to_thread(Path(self.path).parent.mkdir, parents=True, exist_ok=True)
        self._writer = await self._connect()
        await self._writer.execute("PRAGMA journal_mode=WAL")
        await self._writer.executescript(SCHEMA)
        await self._add_missing_columns()
        self._reader = await self._connect()
        await self.heartbeat()

    async def _add_missing_columns(self) -> None:
        """Additive migration of a database created by an earlier release (other processes may race us)."""
        for table, column, declaration in ADDED_COLUMNS:
            async with self._writer.execute(f"PRAGMA table_info({table})") as cursor:
                present = {row[1] for row in await cursor.fetchall()}
            if column in present:
                continue
            try:
                await self._writer.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
            except sqlite3.OperationalError as exc:
                if "duplicate column" not in str(exc):
                    raise

    async def _connect(self) -> aiosqlite.Connection:
        connection = await aiosqlite.connect(self.path, isolation_level=None)  # we BEGIN ourselves
        await connection.execute(f"PRAGMA busy_timeout={self.busy_timeout_ms}")
        await connection.execute("PRAGMA synchronous=NORMAL")
        return connection

    async def close(self) -> None:
        for connection in (self._reader, self._writer):
            if connection is not None:
                with contextlib.suppress(Exception):
                    await connection.close()
        self._reader = self._writer = None

    @contextlib.asynccontextmanager
    async def _transaction(self):
        """One write transaction on the writer connection, rolled back whatever ends it early.

        ``BEGIN IMMEDIATE`` takes the file's write lock up front, waiting for another connection's
        write (the usage ledger, batches, stored responses, another process) up to the busy
        timeout. A plain (deferred) ``BEGIN`` whose first statement reads (the flush's fencing
        SELECT) holds a read snapshot when it comes to write: SQLite then never waits (waiting
        could deadlock two such upgraders), it fails at once with "database is locked", and does
        so as well if anyone committed since the snapshot (``SQLITE_BUSY_SNAPSHOT``). That made
        every flush that met another writer's transaction fail (tests/gateway/sessions/
        test_sqlite_transactions.py).

        aiosqlite runs each statement in its own thread in the order they were sent, whether or
        not the caller still awaits it: a call cancelled (a store timeout, a shutdown) while its
        BEGIN or COMMIT is on the way leaves that statement to run anyway. So the BEGIN is inside
        the rollback's reach, and the ROLLBACK is sent even from a cancelled task (shielded):
        otherwise the connection stays inside the transaction and every later BEGIN fails
        ("cannot start a transaction within a transaction") until the process restarts.
        """
        async with self._lock:
            writer = self._writer
            try:
                await writer.execute("BEGIN IMMEDIATE")
                yield writer
                await writer.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(Exception):  # (none open: a BEGIN that failed, a COMMIT that ran)
                    await asyncio.shield(writer.execute("ROLLBACK"))
                raise
            self.commits += 1

    # --- generations ---------------------------------------------------------------
    async def claim(self, generation: NewGeneration) -> bool:
        try:
            await self._claim(generation)
        except _Refused:
            return False
        return True

    async def _claim(self, generation: NewGeneration) -> None:
        now = time.time()
        async with self._transaction() as db:
            async with db.execute(
                "SELECT s.gen_id, s.status, s.replica, r.heartbeat_at FROM stream_sessions s "
                "LEFT JOIN stream_replicas r ON r.replica = s.replica WHERE s.owner = ? AND s.session_id = ?",
                (generation.owner, generation.session_id),
            ) as cursor:
                row = await cursor.fetchone()
            if row is not None:
                old_gen, status, replica, heartbeat = row
                if status == LIVE and replica != self.replica and self._alive(heartbeat, now):
                    raise _Refused
                await db.execute("DELETE FROM stream_chunks WHERE gen_id = ?", (old_gen,))
            await db.execute(_UPSERT_GENERATION, (generation.owner, generation.session_id, generation.gen_id,
                                                  int(generation.named), generation.dialect, self.replica, now, now))

    async def discard(self, gen_id: int) -> None:
        async with self._transaction() as db:
            await db.execute("DELETE FROM stream_chunks WHERE gen_id = ?", (gen_id,))
            await db.execute("DELETE FROM stream_sessions WHERE gen_id = ?", (gen_id,))

    async def write(self, batch: Batch) -> set[int]:
        now = time.time()
        fenced: set[int] = set()
        async with self._transaction() as db:
            if batch.generations:
                await db.executemany(_UPSERT_GENERATION, [
                    (g.owner, g.session_id, g.gen_id, int(g.named), g.dialect, self.replica, now, now)
                    for g in batch.generations
                ])
            touched = sorted({c.gen_id for c in batch.chunks} | {e.gen_id for e in batch.endings})
            live: set[int] = set()
            for start in range(0, len(touched), 500):
                part = touched[start:start + 500]
                # Fencing: only generations still live and produced by this process take writes
                # (inside the write transaction: SQLite runs one writer at a time).
                async with db.execute(
                    f"SELECT gen_id FROM stream_sessions WHERE gen_id IN ({','.join('?' * len(part))}) "
                    "AND status = 'live' AND replica = ?", (*part, self.replica),
                ) as cursor:
                    live.update(row[0] for row in await cursor.fetchall())
            fenced = set(touched) - live
            chunks = [(c.gen_id, c.first_idx, c.last_idx, c.frames) for c in batch.chunks if c.gen_id in live]
            if chunks:
                await db.executemany(
                    "INSERT OR IGNORE INTO stream_chunks (gen_id, first_idx, last_idx, frames) VALUES (?, ?, ?, ?)",
                    chunks,
                )
            endings = [(e.how, e.count, now, e.gen_id) for e in batch.endings if e.gen_id in live]
            if endings:
                await db.executemany(
                    "UPDATE stream_sessions SET status = 'ended', how = ?, count = ?, updated_at = ? WHERE gen_id = ?",
                    endings,
                )
        return fenced

    # --- reading ---------------------------------------------------------------------
    async def load(self, owner: str, session_id: str) -> StoredSession | None:
        async with self._reader.execute(
            "SELECT " + _SESSION_COLUMNS + " WHERE s.owner = ? AND s.session_id = ?", (owner, session_id)
        ) as cursor:
            row = await cursor.fetchone()
        return None if row is None else self._stored(row, time.time())

    async def read_frames(self, gen_id: int, start: int, *, max_chunks: int = 64) -> list[bytes]:
        async with self._reader.execute(
            "SELECT first_idx, frames FROM stream_chunks WHERE gen_id = ? AND last_idx >= ? "
            "ORDER BY first_idx LIMIT ?",
            (gen_id, start, max_chunks),
        ) as cursor:
            rows = await cursor.fetchall()
        return split_chunk_rows(rows, start)

    def signal(self, gen_id: int) -> asyncio.Future:
        # No push between processes here: followers look again after poll_interval.
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        loop.call_later(self.poll_interval, _resolve, future)
        return future

    # --- dead producers ----------------------------------------------------------------
    async def orphans(self) -> list[StoredSession]:
        now = time.time()
        async with self._reader.execute(
            "SELECT " + _SESSION_COLUMNS + " WHERE s.status = 'live' AND s.replica != ? "
            "AND (r.heartbeat_at IS NULL OR r.heartbeat_at < ?)",
            (self.replica, now - self.lease_seconds),
        ) as cursor:
            rows = await cursor.fetchall()
        return [self._stored(row, now) for row in rows]

    async def end_orphan(self, gen_id: int, make_ending: EndingFactory) -> bool:
        now = time.time()
        async with self._transaction() as db:
            async with db.execute(
                "SELECT s.session_id, s.status, s.replica, r.heartbeat_at FROM stream_sessions s "
                "LEFT JOIN stream_replicas r ON r.replica = s.replica WHERE s.gen_id = ?", (gen_id,)
            ) as cursor:
                row = await cursor.fetchone()
            if row is None or row[1] != LIVE or (row[2] != self.replica and self._alive(row[3], now)):
                return False
            async with db.execute(
                "SELECT COALESCE(MAX(last_idx) + 1, 0) FROM stream_chunks WHERE gen_id = ?", (gen_id,)
            ) as cursor:
                (count,) = await cursor.fetchone()
            how, frames = make_ending(row[0], count)
            await db.execute(
                "INSERT INTO stream_chunks (gen_id, first_idx, last_idx, frames) VALUES (?, ?, ?, ?)",
                (gen_id, count, count + len(frames) - 1, pack_frames(frames)),
            )
            await db.execute(
                "UPDATE stream_sessions SET status = 'ended', how = ?, count = ?, updated_at = ? WHERE gen_id = ?",
                (how, count + len(frames), now, gen_id),
            )
        return True

    # --- cancel and listeners across processes --------------------------------------------
    async def request_cancel(self, gen_id: int) -> None:
        async with self._transaction() as db:
            await db.execute(
                "UPDATE stream_sessions SET cancel_requested = 1 WHERE gen_id = ? AND status = 'live'", (gen_id,)
            )

    async def pending_cancels(self) -> list[int]:
        async with self._reader.execute(
            "SELECT gen_id FROM stream_sessions WHERE replica = ? AND status = 'live' AND cancel_requested = 1",
            (self.replica,),
        ) as cursor:
            return [row[0] for row in await cursor.fetchall()]

    async def touch_listener(self, gen_id: int, seconds: float) -> None:
        async with self._transaction() as db:
            await db.execute(
                "UPDATE stream_sessions SET listener_until = ? WHERE gen_id = ?", (time.time() + seconds, gen_id)
            )

    async def has_listener(self, gen_id: int) -> bool:
        async with self._reader.execute(
            "SELECT listener_until FROM stream_sessions WHERE gen_id = ?", (gen_id,)
        ) as cursor:
            row = await cursor.fetchone()
        return row is not None and row[0] > time.time()

    # --- replicas and expiry -------------------------------------------------------------------
    async def heartbeat(self) -> None:
        async with self._transaction() as db:
            await db.execute(
                "INSERT INTO stream_replicas (replica, heartbeat_at) VALUES (?, ?) "
                "ON CONFLICT (replica) DO UPDATE SET heartbeat_at = excluded.heartbeat_at",
                (self.replica, time.time()),
            )

    async def retire(self) -> None:
        async with self._transaction() as db:
            await db.execute("DELETE FROM stream_replicas WHERE replica = ?", (self.replica,))

    async def expire(self, ttl_seconds: float) -> int:
        """Delete sessions that ended more than ``ttl_seconds`` ago (live ones never)."""
        cutoff = time.time() - ttl_seconds
        async with self._transaction() as db:
            await db.execute(
                "DELETE FROM stream_chunks WHERE gen_id IN "
                "(SELECT gen_id FROM stream_sessions WHERE status = 'ended' AND updated_at < ?)", (cutoff,)
            )
            cursor = await db.execute(
                "DELETE FROM stream_sessions WHERE status = 'ended' AND updated_at < ?", (cutoff,)
            )
            removed = cursor.rowcount
            await db.execute(
                "DELETE FROM stream_replicas WHERE heartbeat_at < ? AND replica NOT IN "
                "(SELECT replica FROM stream_sessions WHERE status = 'live')",
                (time.time() - max(ttl_seconds, 10 * self.lease_seconds),),
            )
        return removed

    # --- helpers ------------------------------------------------------------------------------
    def _alive(self, heartbeat: float | None, now: float) -> bool:
        return heartbeat is not None and heartbeat >= now - self.lease_seconds

    def _stored(self, row, now: float) -> StoredSession:
        owner, session_id, gen_id, status, how, named, replica, heartbeat, dialect, count = row
        # This replica's own live generations are in its memory: one found only here is an orphan.
        alive = status == LIVE and replica != self.replica and self._alive(heartbeat, now)
        return StoredSession(owner=owner, session_id=session_id, gen_id=gen_id, status=status, how=how,
                             count=count, named=bool(named), replica=replica, producer_alive=alive, dialect=dialect)


def _resolve(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


class _Refused(Exception):
    """Another live replica produces this session: the claim is refused."""
