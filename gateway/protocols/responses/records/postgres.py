"""Stored responses in PostgreSQL: the ``stored_responses`` table of the gateway's database.

The same database as the session store, through a small pool of its own, so every replica
serves every key's responses. The table is the one earlier releases created beside the
sessions' tables (their responses stay readable; the column added since, ``streamed``, is
added in place). Every time comparison uses the database's clock.
"""

from __future__ import annotations

import zlib

import asyncpg

from gateway.database.engine import close_pool
from gateway.database.pg_schema import ensure_schema
from gateway.http.inputs import NUL
from gateway.protocols.responses.records.base import RUNNING_STATUSES, StoredResponse
from gateway.sessions.store.postgres import postgres_dsn

NOW = "EXTRACT(EPOCH FROM clock_timestamp())::float8"
SCHEMA_LOCK_KEY = 0x726573706F6E  # "respon"
SCHEMA = """
CREATE TABLE IF NOT EXISTS stored_responses (
    owner TEXT NOT NULL,
    response_id TEXT NOT NULL,
    status TEXT NOT NULL,
    background BOOLEAN NOT NULL,
    body BYTEA NOT NULL,
    history BYTEA NOT NULL,
    root TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (owner, response_id)
);
-- Added after the table's first release: a database created before gets the column here.
ALTER TABLE stored_responses ADD COLUMN IF NOT EXISTS streamed BOOLEAN NOT NULL DEFAULT false;
ALTER TABLE stored_responses ADD COLUMN IF NOT EXISTS previous_id TEXT;
CREATE INDEX IF NOT EXISTS stored_responses_by_expiry ON stored_responses (expires_at);
"""
# What ``ensure_schema`` looks for before running SCHEMA: the table by a first column and every column added since.
SCHEMA_COLUMNS = {"stored_responses": ("response_id", "streamed", "previous_id")}
SCHEMA_INDEXES = ("stored_responses_by_expiry",)
_COLUMNS = "status, background, body, history, root, created_at, expires_at, streamed, previous_id"


class PostgresResponses:
    def __init__(self, url: str, *, pool_size: int = 2, timeout: float | None = None) -> None:
        self.dsn = postgres_dsn(url)
        self.timeout = timeout  # connect, acquire and each command (store.bounded bounds the whole call)
        self.pool_size = pool_size
        self._pool: asyncpg.Pool | None = None

    async def open(self) -> None:
        self._pool = await asyncpg.create_pool(self.dsn, min_size=1, max_size=self.pool_size,
                                                command_timeout=self.timeout, timeout=self.timeout or 60)
        async with self._pool.acquire(timeout=self.timeout) as db:
            await ensure_schema(db, SCHEMA, SCHEMA_LOCK_KEY, columns=SCHEMA_COLUMNS, indexes=SCHEMA_INDEXES)

    async def close(self) -> None:
        if self._pool is not None:
            await close_pool(self._pool)  # (bounded, then cut: a database that hangs must not hold the shutdown)
            self._pool = None

    async def save_response(self, record: StoredResponse) -> None:
        async with self._pool.acquire(timeout=self.timeout) as db:
            await db.execute(
                "INSERT INTO stored_responses (owner, response_id, status, background, body, history, root, "
                f"created_at, updated_at, expires_at, streamed, previous_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, "
                f"{NOW}, $9, $10, $11) ON CONFLICT (owner, response_id) DO UPDATE SET status = excluded.status, "
                "background = excluded.background, body = excluded.body, history = excluded.history, "
                "root = excluded.root, created_at = excluded.created_at, updated_at = excluded.updated_at, "
                "expires_at = excluded.expires_at, streamed = excluded.streamed, previous_id = excluded.previous_id",
                record.owner, record.response_id, record.status, record.background, _pack(record.body),
                _pack(record.history), record.root, record.created_at, record.expires_at, record.streamed,
                record.previous_id)

    async def update_response(self, owner: str, response_id: str, *, status: str, body: bytes,
                              from_statuses: tuple[str, ...] = RUNNING_STATUSES) -> bool:
        async with self._pool.acquire(timeout=self.timeout) as db:
            result = await db.execute(
                f"UPDATE stored_responses SET status = $1, body = $2, updated_at = {NOW} "
                "WHERE owner = $3 AND response_id = $4 AND status = ANY($5::text[])",
                status, _pack(body), owner, response_id, list(from_statuses))
        return result == "UPDATE 1"

    async def load_response(self, owner: str, response_id: str) -> StoredResponse | None:
        if NUL in response_id:  # a client's id that no row can hold: PostgreSQL refuses it even to compare
            return None
        async with self._pool.acquire(timeout=self.timeout) as db:
            row = await db.fetchrow(
                f"SELECT {_COLUMNS} FROM stored_responses WHERE owner = $1 AND response_id = $2 "
                f"AND expires_at >= {NOW}", owner, response_id)
        if row is None:
            return None
        return StoredResponse(owner=owner, response_id=response_id, status=row["status"],
                              background=row["background"], body=_unpack(row["body"]),
                              history=_unpack(row["history"]), root=row["root"], created_at=row["created_at"],
                              expires_at=row["expires_at"], streamed=row["streamed"], previous_id=row["previous_id"])

    async def keep_until(self, owner: str, response_ids: list[str], expires_at: float) -> None:
        async with self._pool.acquire(timeout=self.timeout) as db:
            await db.execute("UPDATE stored_responses SET expires_at = $3 WHERE owner = $1 "
                             "AND response_id = ANY($2::text[]) AND expires_at < $3", owner, response_ids, expires_at)

    async def delete_response(self, owner: str, response_id: str) -> bool:
        if NUL in response_id:
            return False
        async with self._pool.acquire(timeout=self.timeout) as db:
            result = await db.execute("DELETE FROM stored_responses WHERE owner = $1 AND response_id = $2",
                                      owner, response_id)
        return result == "DELETE 1"

    async def usage(self, owner: str) -> tuple[int, int]:
        async with self._pool.acquire(timeout=self.timeout) as db:
            row = await db.fetchrow(
                "SELECT COUNT(*) AS count, COALESCE(SUM(octet_length(body) + octet_length(history)), 0) AS size "
                f"FROM stored_responses WHERE owner = $1 AND expires_at >= {NOW}", owner)
        return int(row["count"]), int(row["size"])

    async def expire(self) -> int:
        async with self._pool.acquire(timeout=self.timeout) as db:
            result = await db.execute(f"DELETE FROM stored_responses WHERE expires_at < {NOW}")
        return int(result.rpartition(" ")[2] or 0)


def _pack(data: bytes) -> bytes:
    return zlib.compress(data, 1)


def _unpack(blob: bytes) -> bytes:
    return zlib.decompress(bytes(blob))
