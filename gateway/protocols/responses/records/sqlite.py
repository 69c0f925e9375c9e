"""Stored responses in SQLite: the ``stored_responses`` table of the gateway's SQLite database.

The same file as the session store (``SESSIONS_DATABASE_URL``, else ``DATABASE_URL``), through
a connection of its own (WAL: a write here waits at most for the session writer's commit,
``busy_timeout``). The table is the one earlier releases created beside the sessions' tables,
so their responses stay readable; a column added since (``streamed``) is added in place.
Response objects and conversations are compressed (they repeat their field names).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
import zlib
from pathlib import Path

import aiosqlite

from gateway.protocols.responses.records.base import RUNNING_STATUSES, StoredResponse
from gateway.sessions.store.sqlite import sqlite_path

SCHEMA = """
CREATE TABLE IF NOT EXISTS stored_responses (
    owner TEXT NOT NULL,
    response_id TEXT NOT NULL,
    status TEXT NOT NULL,
    background INTEGER NOT NULL,
    body BLOB NOT NULL,
    history BLOB NOT NULL,
    root TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    streamed INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (owner, response_id)
);
CREATE INDEX IF NOT EXISTS stored_responses_by_expiry ON stored_responses (expires_at);
"""
# Columns added after the table's first release: a database created before gets them at open.
ADDED_COLUMNS = (("streamed", "INTEGER NOT NULL DEFAULT 0"), ("previous_id", "TEXT"))
_COLUMNS = "status, background, body, history, root, created_at, expires_at, streamed, previous_id"


class SQLiteResponses:
    def __init__(self, url: str) -> None:
        self.path = sqlite_path(url)
        self._db: aiosqlite.Connection | None = None
        self._lock = asyncio.Lock()

    async def open(self) -> None:
        await asyncio.to_thread(Path(self.path).parent.mkdir, parents=True, exist_ok=True)
        db = self._db = await aiosqlite.connect(self.path, isolation_level=None)
        await db.execute("PRAGMA busy_timeout=10000")
        await db.execute("PRAGMA journal_mode=WAL")
        await db.execute("PRAGMA synchronous=NORMAL")
        await db.executescript(SCHEMA)
        async with db.execute("PRAGMA table_info(stored_responses)") as cursor:
            present = {row[1] for row in await cursor.fetchall()}
        for column, declaration in ADDED_COLUMNS:
            if column not in present:
                try:
                    await db.execute(f"ALTER TABLE stored_responses ADD COLUMN {column} {declaration}")
                except sqlite3.OperationalError as exc:  # another process added it meanwhile
                    if "duplicate column" not in str(exc):
                        raise

    async def close(self) -> None:
        if self._db is not None:
            with contextlib.suppress(Exception):
                await self._db.close()
            self._db = None

    async def _write(self, sql: str, parameters: tuple) -> int:
        async with self._lock:
            cursor = await self._db.execute(sql, parameters)
            return cursor.rowcount

    async def save_response(self, record: StoredResponse) -> None:
        await self._write(
            "INSERT OR REPLACE INTO stored_responses (owner, response_id, status, background, body, history, "
            "root, created_at, updated_at, expires_at, streamed, previous_id) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (record.owner, record.response_id, record.status, int(record.background), _pack(record.body),
             _pack(record.history), record.root, record.created_at, time.time(), record.expires_at,
             int(record.streamed), record.previous_id))

    async def update_response(self, owner: str, response_id: str, *, status: str, body: bytes,
                              from_statuses: tuple[str, ...] = RUNNING_STATUSES) -> bool:
        changed = await self._write(
            "UPDATE stored_responses SET status = ?, body = ?, updated_at = ? WHERE owner = ? AND response_id = ? "
            f"AND status IN ({','.join('?' * len(from_statuses))})",
            (status, _pack(body), time.time(), owner, response_id, *from_statuses))
        return changed == 1

    async def load_response(self, owner: str, response_id: str) -> StoredResponse | None:
        async with self._db.execute(
            f"SELECT {_COLUMNS} FROM stored_responses WHERE owner = ? AND response_id = ? AND expires_at >= ?",
            (owner, response_id, time.time()),
        ) as cursor:
            row = await cursor.fetchone()
        if row is None:
            return None
        status, background, body, history, root, created_at, expires_at, streamed, previous_id = row
        return StoredResponse(owner=owner, response_id=response_id, status=status, background=bool(background),
                              body=_unpack(body), history=_unpack(history), root=root, created_at=created_at,
                              expires_at=expires_at, streamed=bool(streamed), previous_id=previous_id)

    async def keep_until(self, owner: str, response_ids: list[str], expires_at: float) -> None:
        async with self._lock:
            await self._db.executemany(
                "UPDATE stored_responses SET expires_at = ? WHERE owner = ? AND response_id = ? AND expires_at < ?",
                [(expires_at, owner, response_id, expires_at) for response_id in response_ids])

    async def delete_response(self, owner: str, response_id: str) -> bool:
        return await self._write("DELETE FROM stored_responses WHERE owner = ? AND response_id = ?",
                                 (owner, response_id)) == 1

    async def usage(self, owner: str) -> tuple[int, int]:
        async with self._db.execute(
            "SELECT COUNT(*), COALESCE(SUM(LENGTH(body) + LENGTH(history)), 0) FROM stored_responses "
            "WHERE owner = ? AND expires_at >= ?", (owner, time.time())) as cursor:
            count, size = await cursor.fetchone()
        return int(count), int(size)

    async def expire(self) -> int:
        return await self._write("DELETE FROM stored_responses WHERE expires_at < ?", (time.time(),))


def _pack(data: bytes) -> bytes:
    return zlib.compress(data, 1)


def _unpack(blob: bytes) -> bytes:
    return zlib.decompress(bytes(blob))
