"""The PostgreSQL session store (asyncpg): several gateway replicas share sessions.

Each flush is one transaction that also sends ``NOTIFY stream_frames`` with
the generation ids it wrote, so a replica whose clients follow one of them
reads the new rows at once (a follower also polls every ``poll_interval`` in
case a notification was missed). Cancel requests travel as
``NOTIFY stream_cancel`` (plus a flag the producer polls). Every time
comparison uses the database's clock, so replicas with skewed clocks still
agree on whose producer is alive. (Stored responses, the Responses API's, live in
the same database, in a table of their own: ``protocols.responses.records``.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import asyncpg

from gateway.database.engine import CLOSE_SECONDS, close_pool
from gateway.database.pg_schema import ensure_schema
from gateway.sessions.frames import pack_frames
from gateway.sessions.store.base import (
    LIVE,
    Batch,
    EndingFactory,
    NewGeneration,
    StoredSession,
    split_chunk_rows,
)

log = logging.getLogger("gateway.streams")

NOW = "EXTRACT(EPOCH FROM clock_timestamp())::float8"
FRAMES_CHANNEL = "stream_frames"
CANCEL_CHANNEL = "stream_cancel"
SCHEMA_LOCK_KEY = 0x73747265616D  # "stream"
NOTIFY_PAYLOAD_MAX = 7000  # PostgreSQL's limit is 8000 bytes

SCHEMA = """
CREATE TABLE IF NOT EXISTS stream_sessions (
    owner TEXT NOT NULL,
    session_id TEXT NOT NULL,
    gen_id BIGINT NOT NULL UNIQUE,
    status TEXT NOT NULL,
    how TEXT,
    count INTEGER NOT NULL DEFAULT 0,
    named BOOLEAN NOT NULL,
    replica TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    listener_until DOUBLE PRECISION NOT NULL DEFAULT 0,
    cancel_requested BOOLEAN NOT NULL DEFAULT false,
    dialect TEXT NOT NULL DEFAULT 'openai',
    PRIMARY KEY (owner, session_id)
);
-- Added after the first release: a database created before gets the column here.
ALTER TABLE stream_sessions ADD COLUMN IF NOT EXISTS dialect TEXT NOT NULL DEFAULT 'openai';
CREATE INDEX IF NOT EXISTS stream_sessions_by_status ON stream_sessions (status, updated_at);
CREATE INDEX IF NOT EXISTS stream_sessions_by_replica ON stream_sessions (replica, status);
CREATE TABLE IF NOT EXISTS stream_chunks (
    gen_id BIGINT NOT NULL,
    first_idx INTEGER NOT NULL,
    last_idx INTEGER NOT NULL,
    frames BYTEA NOT NULL,
    PRIMARY KEY (gen_id, first_idx)
);
CREATE TABLE IF NOT EXISTS stream_replicas (
    replica TEXT PRIMARY KEY,
    heartbeat_at DOUBLE PRECISION NOT NULL
);
"""

# What ``ensure_schema`` looks for before running SCHEMA: each table by a first column and every column added since.
SCHEMA_COLUMNS = {"stream_sessions": ("gen_id", "dialect"), "stream_chunks": ("frames",),
                  "stream_replicas": ("heartbeat_at",)}
SCHEMA_INDEXES = ("stream_sessions_by_status", "stream_sessions_by_replica")

_SESSION_COLUMNS = f"""
    s.owner, s.session_id, s.gen_id, s.status, s.how, s.named, s.replica, s.dialect,
    (r.heartbeat_at IS NOT NULL AND r.heartbeat_at >= {NOW} - $1::float8) AS fresh,
    CASE WHEN s.status = 'ended' THEN s.count
         ELSE COALESCE((SELECT MAX(c.last_idx) + 1 FROM stream_chunks c WHERE c.gen_id = s.gen_id), 0) END AS stored
    FROM stream_sessions s LEFT JOIN stream_replicas r ON r.replica = s.replica
"""

# A new generation of the session replaces the row; the same generation written again (the
# writer's first flush of a claimed, named one) changes nothing: resetting it wiped a follower's
# listener lease taken meanwhile on another replica (and a cancel asked meanwhile), and the
# producer then stopped a generation that was being followed.
_UPSERT_GENERATION = f"""
INSERT INTO stream_sessions (owner, session_id, gen_id, status, named, replica, dialect, created_at, updated_at)
VALUES ($1, $2, $3, 'live', $4, $5, $6, {NOW}, {NOW})
ON CONFLICT (owner, session_id) DO UPDATE SET
    gen_id = excluded.gen_id, status = 'live', how = NULL, count = 0, named = excluded.named,
    replica = excluded.replica, dialect = excluded.dialect, created_at = excluded.created_at,
    updated_at = excluded.updated_at, listener_until = 0, cancel_requested = false
    WHERE stream_sessions.gen_id <> excluded.gen_id
"""


def postgres_dsn(url: str) -> str:
    """An asyncpg DSN from ``postgresql[+asyncpg]://`` or ``postgres://``."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.split("+", 1)[0] not in ("postgresql", "postgres"):
        raise ValueError(f"SESSION_STORE=postgres needs a postgresql:// URL in SESSIONS_DATABASE_URL or DATABASE_URL, "
                         f"got {scheme or url!r}")
    return "postgresql://" + rest


class PostgresStore:
    name = "postgres"

    def __init__(self, url: str, *, replica: str, lease_seconds: float, poll_interval: float,
                 pool_size: int = 4, timeout: float | None = None) -> None:
        self.dsn = postgres_dsn(url)
        self.timeout = timeout  # connect, acquire and each command (store.bounded bounds the whole call)
        self.replica = replica
        self.lease_seconds = lease_seconds
        self.poll_interval = poll_interval
        self.pool_size = pool_size
        self.commits = 0
        self.on_cancel_request = None
        self._pool: asyncpg.Pool | None = None
        self._listener: asyncpg.Connection | None = None
        self._signals: dict[int, asyncio.Future] = {}

    async def open(self) -> None:
        self._pool = await asyncpg.create_pool(self.dsn, min_size=1, max_size=self.pool_size,
                                                command_timeout=self.timeout, timeout=self.timeout or 60)
        async with self._pool.acquire(timeout=self.timeout) as db:
            await ensure_schema(db, SCHEMA, SCHEMA_LOCK_KEY, columns=SCHEMA_COLUMNS, indexes=SCHEMA_INDEXES)
        await self._listen()
        await self.heartbeat()

    async def _listen(self) -> None:
        if self._listener is not None and not self._listener.is_closed():
            return
        listener = await asyncpg.connect(self.dsn, timeout=self.timeout or 60)
        await listener.add_listener(FRAMES_CHANNEL, self._on_frames)
        await listener.add_listener(CANCEL_CHANNEL, self._on_cancel)
        self._listener = listener

    async def close(self) -> None:
        # Each bounded: closing waits for the server, which a database that hangs never answers (a
        # gateway stopped with SIGTERM then never exited); past the bound the connections are cut.
        if self._listener is not None:
            with contextlib.suppress(Exception):
                await self._listener.close(timeout=CLOSE_SECONDS)  # (asyncpg aborts it past the timeout)
            self._listener = None
        if self._pool is not None:
            await close_pool(self._pool)
            self._pool = None

    # --- notifications -------------------------------------------------------------------------
    def _on_frames(self, connection, pid, channel, payload: str) -> None:
        signals = self._signals
        for part in payload.split(","):
            future = signals.pop(int(part), None) if part else None
            if future is not None and not future.done():
                future.set_result(None)

    def _on_cancel(self, connection, pid, channel, payload: str) -> None:
        if self.on_cancel_request is not None:
            self.on_cancel_request(int(payload))

    def signal(self, gen_id: int) -> asyncio.Future:
        future = self._signals.get(gen_id)
        if future is None or future.done():
            loop = asyncio.get_running_loop()
            future = self._signals[gen_id] = loop.create_future()
            loop.call_later(self.poll_interval, self._expire_signal, gen_id, future)
        return future

    def _expire_signal(self, gen_id: int, future: asyncio.Future) -> None:
        # A missed notification costs one poll interval, never a hang.
        if self._signals.get(gen_id) is future:
            del self._signals[gen_id]
        if not future.done():
            future.set_result(None)

    # --- generations ---------------------------------------------------------------------------
    async def claim(self, generation: NewGeneration) -> bool:
        async with self._pool.acquire(timeout=self.timeout) as db, db.transaction():
            await db.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
                             f"{generation.owner}:{generation.session_id}")
            row = await db.fetchrow(
                "SELECT s.gen_id, s.status, s.replica, "
                f"(r.heartbeat_at IS NOT NULL AND r.heartbeat_at >= {NOW} - $3::float8) AS fresh "
                "FROM stream_sessions s LEFT JOIN stream_replicas r ON r.replica = s.replica "
                "WHERE s.owner = $1 AND s.session_id = $2",
                generation.owner, generation.session_id, self.lease_seconds,
            )
            if row is not None:
                if row["status"] == LIVE and row["replica"] != self.replica and row["fresh"]:
                    return False
                await db.execute("DELETE FROM stream_chunks WHERE gen_id = $1", row["gen_id"])
            await db.execute(_UPSERT_GENERATION, generation.owner, generation.session_id, generation.gen_id,
                             generation.named, self.replica, generation.dialect)
        self.commits += 1
        return True

    async def discard(self, gen_id: int) -> None:
        async with self._pool.acquire(timeout=self.timeout) as db, db.transaction():
            await db.execute("DELETE FROM stream_chunks WHERE gen_id = $1", gen_id)
            await db.execute("DELETE FROM stream_sessions WHERE gen_id = $1", gen_id)
        self.commits += 1

    async def write(self, batch: Batch) -> set[int]:
        fenced: set[int] = set()
        async with self._pool.acquire(timeout=self.timeout) as db, db.transaction():
            if batch.generations:
                await db.executemany(_UPSERT_GENERATION, [
                    (g.owner, g.session_id, g.gen_id, g.named, self.replica, g.dialect) for g in batch.generations
                ])
            touched = sorted({c.gen_id for c in batch.chunks} | {e.gen_id for e in batch.endings})
            if touched:
                # Fencing: only generations still live and produced by this replica take writes.
                # The row locks (no new row versions) order this flush with a concurrent
                # end_orphan, which locks the row FOR UPDATE.
                rows = await db.fetch(
                    "SELECT gen_id FROM stream_sessions WHERE gen_id = ANY($1::bigint[]) "
                    "AND status = 'live' AND replica = $2 FOR KEY SHARE", touched, self.replica)
                live = {row[0] for row in rows}
                fenced = set(touched) - live
                chunks = [c for c in batch.chunks if c.gen_id in live]
                endings = [e for e in batch.endings if e.gen_id in live]
                if chunks:
                    await db.executemany(
                        "INSERT INTO stream_chunks (gen_id, first_idx, last_idx, frames) VALUES ($1, $2, $3, $4) "
                        "ON CONFLICT DO NOTHING",
                        [(c.gen_id, c.first_idx, c.last_idx, c.frames) for c in chunks],
                    )
                if endings:
                    await db.executemany(
                        f"UPDATE stream_sessions SET status = 'ended', how = $1, count = $2, updated_at = {NOW} "
                        "WHERE gen_id = $3", [(e.how, e.count, e.gen_id) for e in endings],
                    )
                for payload in _notify_payloads({c.gen_id for c in chunks}):
                    await db.execute("SELECT pg_notify($1, $2)", FRAMES_CHANNEL, payload)
        self.commits += 1
        return fenced

    # --- reading ---------------------------------------------------------------------------------
    async def load(self, owner: str, session_id: str) -> StoredSession | None:
        async with self._pool.acquire(timeout=self.timeout) as db:
            row = await db.fetchrow("SELECT " + _SESSION_COLUMNS + " WHERE s.owner = $2 AND s.session_id = $3",
                                    self.lease_seconds, owner, session_id)
        return None if row is None else self._stored(row)

    async def read_frames(self, gen_id: int, start: int, *, max_chunks: int = 64) -> list[bytes]:
        async with self._pool.acquire(timeout=self.timeout) as db:
            rows = await db.fetch(
                "SELECT first_idx, frames FROM stream_chunks WHERE gen_id = $1 AND last_idx >= $2 "
                "ORDER BY first_idx LIMIT $3", gen_id, start, max_chunks,
            )
        return split_chunk_rows([(row[0], row[1]) for row in rows], start)

    # --- dead producers ------------------------------------------------------------------------
    async def orphans(self) -> list[StoredSession]:
        async with self._pool.acquire(timeout=self.timeout) as db:
            rows = await db.fetch(
                "SELECT " + _SESSION_COLUMNS + " WHERE s.status = 'live' AND s.replica != $2 "
                f"AND (r.heartbeat_at IS NULL OR r.heartbeat_at < {NOW} - $1::float8)",
                self.lease_seconds, self.replica,
            )
        return [self._stored(row) for row in rows]

    async def end_orphan(self, gen_id: int, make_ending: EndingFactory) -> bool:
        async with self._pool.acquire(timeout=self.timeout) as db, db.transaction():
            row = await db.fetchrow(
                "SELECT s.session_id, s.status, s.replica, "
                f"(r.heartbeat_at IS NOT NULL AND r.heartbeat_at >= {NOW} - $2::float8) AS fresh "
                "FROM stream_sessions s LEFT JOIN stream_replicas r ON r.replica = s.replica "
                "WHERE s.gen_id = $1 FOR UPDATE OF s",
                gen_id, self.lease_seconds,
            )
            if row is None or row["status"] != LIVE or (row["replica"] != self.replica and row["fresh"]):
                return False
            count = await db.fetchval(
                "SELECT COALESCE(MAX(last_idx) + 1, 0) FROM stream_chunks WHERE gen_id = $1", gen_id)
            how, frames = make_ending(row["session_id"], count)
            await db.execute(
                "INSERT INTO stream_chunks (gen_id, first_idx, last_idx, frames) VALUES ($1, $2, $3, $4)",
                gen_id, count, count + len(frames) - 1, pack_frames(frames),
            )
            await db.execute(
                f"UPDATE stream_sessions SET status = 'ended', how = $1, count = $2, updated_at = {NOW} "
                "WHERE gen_id = $3", how, count + len(frames), gen_id,
            )
            await db.execute("SELECT pg_notify($1, $2)", FRAMES_CHANNEL, str(gen_id))
        self.commits += 1
        return True

    # --- cancel and listeners across replicas ---------------------------------------------------
    async def request_cancel(self, gen_id: int) -> None:
        async with self._pool.acquire(timeout=self.timeout) as db, db.transaction():
            await db.execute(
                "UPDATE stream_sessions SET cancel_requested = true WHERE gen_id = $1 AND status = 'live'", gen_id)
            await db.execute("SELECT pg_notify($1, $2)", CANCEL_CHANNEL, str(gen_id))
        self.commits += 1

    async def pending_cancels(self) -> list[int]:
        async with self._pool.acquire(timeout=self.timeout) as db:
            rows = await db.fetch(
                "SELECT gen_id FROM stream_sessions WHERE replica = $1 AND status = 'live' AND cancel_requested",
                self.replica,
            )
        return [row[0] for row in rows]

    async def touch_listener(self, gen_id: int, seconds: float) -> None:
        async with self._pool.acquire(timeout=self.timeout) as db:
            await db.execute(f"UPDATE stream_sessions SET listener_until = {NOW} + $2::float8 WHERE gen_id = $1",
                             gen_id, seconds)

    async def has_listener(self, gen_id: int) -> bool:
        async with self._pool.acquire(timeout=self.timeout) as db:
            return bool(await db.fetchval(
                f"SELECT listener_until > {NOW} FROM stream_sessions WHERE gen_id = $1", gen_id))

    # --- replicas and expiry ---------------------------------------------------------------------
    async def heartbeat(self) -> None:
        async with self._pool.acquire(timeout=self.timeout) as db:
            await db.execute(
                f"INSERT INTO stream_replicas (replica, heartbeat_at) VALUES ($1, {NOW}) "
                "ON CONFLICT (replica) DO UPDATE SET heartbeat_at = excluded.heartbeat_at", self.replica)
        try:
            await self._listen()  # reconnect the LISTEN connection if it was lost
        except (OSError, asyncpg.PostgresError) as exc:
            log.warning("cannot LISTEN for session events; followers fall back to polling",
                        extra={"error": exc.__class__.__name__})

    async def retire(self) -> None:
        async with self._pool.acquire(timeout=self.timeout) as db:
            await db.execute("DELETE FROM stream_replicas WHERE replica = $1", self.replica)

    async def expire(self, ttl_seconds: float) -> int:
        async with self._pool.acquire(timeout=self.timeout) as db, db.transaction():
            await db.execute(
                "DELETE FROM stream_chunks WHERE gen_id IN (SELECT gen_id FROM stream_sessions "
                f"WHERE status = 'ended' AND updated_at < {NOW} - $1::float8)", ttl_seconds)
            removed = await db.fetchval(
                "WITH gone AS (DELETE FROM stream_sessions "
                f"WHERE status = 'ended' AND updated_at < {NOW} - $1::float8 RETURNING 1) SELECT count(*) FROM gone",
                ttl_seconds)
            await db.execute(
                f"DELETE FROM stream_replicas WHERE heartbeat_at < {NOW} - $1::float8 AND replica NOT IN "
                "(SELECT replica FROM stream_sessions WHERE status = 'live')",
                max(ttl_seconds, 10 * self.lease_seconds))
        return removed

    def _stored(self, row) -> StoredSession:
        alive = row["status"] == LIVE and row["replica"] != self.replica and row["fresh"]
        return StoredSession(owner=row["owner"], session_id=row["session_id"], gen_id=row["gen_id"],
                             status=row["status"], how=row["how"], count=row["stored"], named=row["named"],
                             replica=row["replica"], producer_alive=bool(alive), dialect=row["dialect"])


def _notify_payloads(gen_ids: set[int]) -> list[str]:
    """Comma-separated generation ids, split to stay under PostgreSQL's NOTIFY payload limit."""
    payloads, current = [], []
    size = 0
    for gen_id in gen_ids:
        text = str(gen_id)
        if size + len(text) + 1 > NOTIFY_PAYLOAD_MAX and current:
            payloads.append(",".join(current))
            current, size = [], 0
        current.append(text)
        size += len(text) + 1
    if current:
        payloads.append(",".join(current))
    return payloads
