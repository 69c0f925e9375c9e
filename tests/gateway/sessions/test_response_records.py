"""Stored responses in SQLite and in memory: owned by their key, updated only while running, expired, migrated."""

from __future__ import annotations

import sqlite3
import time

import pytest

from gateway.sessions.store.base import NewGeneration, StoredResponse
from gateway.sessions.store.memory import MemoryResponses
from gateway.sessions.store.sqlite import SQLiteStore


def record(owner: str = "key-a", response_id: str = "resp_1", status: str = "queued", *,
           expires_in: float = 60.0) -> StoredResponse:
    now = time.time()
    return StoredResponse(owner=owner, response_id=response_id, status=status, background=True,
                          body=b'{"id": "%s"}' % response_id.encode(), history=b"[]", root=response_id,
                          created_at=now, expires_at=now + expires_in)


@pytest.fixture(params=["sqlite", "memory"])
async def records(request, tmp_path):
    if request.param == "memory":
        yield MemoryResponses(max_records=3)
        return
    store = SQLiteStore(f"sqlite:///{tmp_path}/s.db", replica="r1", lease_seconds=10, poll_interval=0.05)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


async def test_a_response_belongs_to_its_key(records):
    await records.save_response(record())
    assert (await records.load_response("key-a", "resp_1")).body == b'{"id": "resp_1"}'
    assert await records.load_response("key-b", "resp_1") is None
    assert not await records.update_response("key-b", "resp_1", status="completed", body=b"{}")
    assert not await records.delete_response("key-b", "resp_1")


async def test_updates_apply_only_from_the_statuses_named(records):
    await records.save_response(record())
    assert not await records.update_response("key-a", "resp_1", status="in_progress", body=b"{}",
                                             from_statuses=("in_progress",))
    assert await records.update_response("key-a", "resp_1", status="in_progress", body=b'{"s": 1}',
                                         from_statuses=("queued",))
    assert await records.update_response("key-a", "resp_1", status="cancelled", body=b'{"s": 2}')
    assert not await records.update_response("key-a", "resp_1", status="completed", body=b'{"s": 3}')  # final
    got = await records.load_response("key-a", "resp_1")
    assert got.status == "cancelled" and got.body == b'{"s": 2}' and not got.running


async def test_expired_responses_are_gone(records):
    await records.save_response(record(expires_in=-1))
    assert await records.load_response("key-a", "resp_1") is None


async def test_memory_keeps_at_most_its_bound():
    memory = MemoryResponses(max_records=3)
    for n in range(5):
        await memory.save_response(record(response_id=f"resp_{n}"))
    kept = [n for n in range(5) if await memory.load_response("key-a", f"resp_{n}") is not None]
    assert kept == [2, 3, 4]


async def test_expiry_deletes_stored_responses_in_sqlite(tmp_path):
    store = SQLiteStore(f"sqlite:///{tmp_path}/s.db", replica="r1", lease_seconds=10, poll_interval=0.05)
    await store.open()
    try:
        await store.save_response(record("k", "resp_old", expires_in=-1))
        await store.save_response(record("k", "resp_new"))
        await store.expire(3600)
    finally:
        await store.close()
    with sqlite3.connect(tmp_path / "s.db") as db:
        assert [row[0] for row in db.execute("SELECT response_id FROM stored_responses")] == ["resp_new"]


OLD_SCHEMA = """
CREATE TABLE stream_sessions (owner TEXT NOT NULL, session_id TEXT NOT NULL, gen_id INTEGER NOT NULL UNIQUE,
    status TEXT NOT NULL, how TEXT, count INTEGER NOT NULL DEFAULT 0, named INTEGER NOT NULL, replica TEXT NOT NULL,
    created_at REAL NOT NULL, updated_at REAL NOT NULL, listener_until REAL NOT NULL DEFAULT 0,
    cancel_requested INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (owner, session_id));
CREATE TABLE stream_chunks (gen_id INTEGER NOT NULL, first_idx INTEGER NOT NULL, last_idx INTEGER NOT NULL,
    frames BLOB NOT NULL, PRIMARY KEY (gen_id, first_idx)) WITHOUT ROWID;
CREATE TABLE stream_replicas (replica TEXT PRIMARY KEY, heartbeat_at REAL NOT NULL);
INSERT INTO stream_sessions VALUES ('k', 'old-chat', 5, 'ended', 'completed', 3, 1, 'gone', 1, 1, 0, 0);
"""


async def test_a_database_of_the_previous_release_is_migrated_in_place(tmp_path):
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        db.executescript(OLD_SCHEMA)
    stores = [SQLiteStore(f"sqlite:///{path}", replica=name, lease_seconds=10, poll_interval=0.05)
              for name in ("r1", "r2")]
    for store in stores:  # a second replica opening the same file finds the column already there
        await store.open()
    try:
        old = await stores[0].load("k", "old-chat")
        assert old.dialect == "openai" and old.count == 3 and old.how == "completed"
        assert await stores[0].claim(NewGeneration("k", "resp_2", 6, True, dialect="responses"))
        assert (await stores[1].load("k", "resp_2")).dialect == "responses"
        await stores[1].save_response(record("k", "resp_2"))
        assert (await stores[0].load_response("k", "resp_2")).root == "resp_2"
    finally:
        for store in stores:
            await store.close()
