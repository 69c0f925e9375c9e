"""Stored responses in SQLite, PostgreSQL and memory: owned by their key, updated only while running, expired,
and a database of the release that kept them beside the sessions still readable."""

from __future__ import annotations

import sqlite3
import time
import zlib

import asyncpg
import pytest

from gateway.protocols.responses.records.base import StoredResponse
from gateway.protocols.responses.records.memory import MemoryResponses
from gateway.protocols.responses.records.postgres import PostgresResponses
from gateway.protocols.responses.records.sqlite import SQLiteResponses
from gateway.sessions.store.base import NewGeneration
from gateway.sessions.store.sqlite import SQLiteStore


def record(owner: str = "key-a", response_id: str = "resp_1", status: str = "queued", *,
           expires_in: float = 60.0, streamed: bool = False) -> StoredResponse:
    now = time.time()
    return StoredResponse(owner=owner, response_id=response_id, status=status, background=True,
                          body=b'{"id": "%s"}' % response_id.encode(), history=b"[]", root=response_id,
                          created_at=now, expires_at=now + expires_in, streamed=streamed)


@pytest.fixture(params=["sqlite", "memory"])
async def records(request, tmp_path):
    if request.param == "memory":
        yield MemoryResponses(max_records=3)
        return
    store = SQLiteResponses(f"sqlite:///{tmp_path}/s.db")
    await store.open()
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
async def postgres_records(postgres_database_url):
    store = PostgresResponses(postgres_database_url)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


async def test_postgres_keeps_them_by_the_same_rules(postgres_records):
    await test_a_response_belongs_to_its_key(postgres_records)
    await test_updates_apply_only_from_the_statuses_named(postgres_records, response_id="resp_2")
    await test_expired_responses_are_gone_and_deleted(postgres_records)
    await test_usage_counts_a_keys_responses_not_expired_and_their_stored_bytes(postgres_records)
    await test_a_turn_names_the_one_it_continues_and_a_chain_is_kept_as_long_as_its_newest(postgres_records)


async def test_an_id_with_a_nul_character_is_a_response_no_store_holds(postgres_records):
    # A client's id (GET/DELETE /v1/responses/{id}, previous_response_id): PostgreSQL text cannot hold
    # NUL even to compare, and its error came back as the store being unavailable (503, "retry").
    assert await postgres_records.load_response("k", "resp_\x00a") is None
    assert await postgres_records.delete_response("k", "resp_\x00a") is False


async def test_a_response_belongs_to_its_key(records):
    await records.save_response(record(streamed=True))
    got = await records.load_response("key-a", "resp_1")
    assert got.body == b'{"id": "resp_1"}' and got.streamed and got.has_events
    assert await records.load_response("key-b", "resp_1") is None
    assert not await records.update_response("key-b", "resp_1", status="completed", body=b"{}")
    assert not await records.delete_response("key-b", "resp_1")


async def test_updates_apply_only_from_the_statuses_named(records, response_id="resp_1"):
    await records.save_response(record(response_id=response_id))
    assert not await records.update_response("key-a", response_id, status="in_progress", body=b"{}",
                                             from_statuses=("in_progress",))
    assert await records.update_response("key-a", response_id, status="in_progress", body=b'{"s": 1}',
                                         from_statuses=("queued",))
    assert await records.update_response("key-a", response_id, status="cancelled", body=b'{"s": 2}')
    assert not await records.update_response("key-a", response_id, status="completed", body=b'{"s": 3}')  # final
    got = await records.load_response("key-a", response_id)
    assert got.status == "cancelled" and got.body == b'{"s": 2}' and not got.running


async def test_expired_responses_are_gone_and_deleted(records):
    await records.save_response(record("k", "resp_old", expires_in=-1))
    await records.save_response(record("k", "resp_new"))
    assert await records.load_response("k", "resp_old") is None
    await records.expire()
    assert await records.load_response("k", "resp_new") is not None
    assert not await records.delete_response("k", "resp_old")  # (deleted by the expiry already)


async def test_usage_counts_a_keys_responses_not_expired_and_their_stored_bytes(records):
    assert await records.usage("quota-key") == (0, 0)
    await records.save_response(record("quota-key", "resp_q1"))
    await records.save_response(record("quota-key", "resp_gone", expires_in=-1))
    await records.save_response(record("someone-else", "resp_q3"))
    count, size = await records.usage("quota-key")
    assert count == 1
    # as stored: the memory store keeps the bytes as they are, the databases compressed; never nothing
    assert 0 < size <= len(b'{"id": "resp_q1"}') + len(b"[]") + 20
    await records.delete_response("quota-key", "resp_q1")
    assert await records.usage("quota-key") == (0, 0)


async def test_a_turn_names_the_one_it_continues_and_a_chain_is_kept_as_long_as_its_newest(records):
    first = record("chain-key", "resp_c1", expires_in=5)
    second = record("chain-key", "resp_c2", expires_in=500)
    second.previous_id = "resp_c1"
    await records.save_response(first)
    await records.save_response(second)
    assert (await records.load_response("chain-key", "resp_c2")).previous_id == "resp_c1"
    assert (await records.load_response("chain-key", "resp_c1")).previous_id is None
    await records.keep_until("chain-key", ["resp_c1", "resp_c2"], second.expires_at)
    await records.keep_until("other-key", ["resp_c1"], second.expires_at + 1000)  # another key's: nothing
    kept = await records.load_response("chain-key", "resp_c1")
    assert kept.expires_at == pytest.approx(second.expires_at)
    await records.keep_until("chain-key", ["resp_c1"], first.expires_at)  # never shortened
    assert (await records.load_response("chain-key", "resp_c1")).expires_at == pytest.approx(second.expires_at)


async def test_memory_keeps_at_most_its_bound():
    memory = MemoryResponses(max_records=3)
    for n in range(5):
        await memory.save_response(record(response_id=f"resp_{n}"))
    kept = [n for n in range(5) if await memory.load_response("key-a", f"resp_{n}") is not None]
    assert kept == [2, 3, 4]


async def test_expiry_deletes_stored_responses_in_sqlite(tmp_path):
    store = SQLiteResponses(f"sqlite:///{tmp_path}/s.db")
    await store.open()
    try:
        await store.save_response(record("k", "resp_old", expires_in=-1))
        await store.save_response(record("k", "resp_new"))
        assert await store.expire() == 1
    finally:
        await store.close()
    with sqlite3.connect(tmp_path / "s.db") as db:
        assert [row[0] for row in db.execute("SELECT response_id FROM stored_responses")] == ["resp_new"]


# The release before: sessions without a dialect column, responses kept by the session store (no ``streamed``).
OLD_SCHEMA = """
CREATE TABLE stream_sessions (owner TEXT NOT NULL, session_id TEXT NOT NULL, gen_id INTEGER NOT NULL UNIQUE,
    status TEXT NOT NULL, how TEXT, count INTEGER NOT NULL DEFAULT 0, named INTEGER NOT NULL, replica TEXT NOT NULL,
    created_at REAL NOT NULL, updated_at REAL NOT NULL, listener_until REAL NOT NULL DEFAULT 0,
    cancel_requested INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (owner, session_id));
CREATE TABLE stream_chunks (gen_id INTEGER NOT NULL, first_idx INTEGER NOT NULL, last_idx INTEGER NOT NULL,
    frames BLOB NOT NULL, PRIMARY KEY (gen_id, first_idx)) WITHOUT ROWID;
CREATE TABLE stream_replicas (replica TEXT PRIMARY KEY, heartbeat_at REAL NOT NULL);
CREATE TABLE stored_responses (owner TEXT NOT NULL, response_id TEXT NOT NULL, status TEXT NOT NULL,
    background INTEGER NOT NULL, body BLOB NOT NULL, history BLOB NOT NULL, root TEXT NOT NULL,
    created_at REAL NOT NULL, updated_at REAL NOT NULL, expires_at REAL NOT NULL, PRIMARY KEY (owner, response_id));
INSERT INTO stream_sessions VALUES ('k', 'old-chat', 5, 'ended', 'completed', 3, 1, 'gone', 1, 1, 0, 0);
"""


async def test_a_sqlite_database_of_the_previous_release_is_migrated_in_place(tmp_path):
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        db.executescript(OLD_SCHEMA)
        db.execute("INSERT INTO stored_responses VALUES ('k', 'resp_old', 'completed', 1, ?, ?, 'resp_old', ?, ?, ?)",
                   (zlib.compress(b'{"id": "resp_old"}'), zlib.compress(b"[]"),
                    time.time(), time.time(), time.time() + 60))
    url = f"sqlite:///{path}"
    stores = [SQLiteStore(url, replica=name, lease_seconds=10, poll_interval=0.05) for name in ("r1", "r2")]
    responses = [SQLiteResponses(url) for _ in range(2)]
    for opened in (*stores, *responses):  # a second replica opening the same file finds the columns already there
        await opened.open()
    try:
        old = await stores[0].load("k", "old-chat")
        assert old.dialect == "openai" and old.count == 3 and old.how == "completed"
        assert await stores[0].claim(NewGeneration("k", "resp_2", 6, True, dialect="responses"))
        assert (await stores[1].load("k", "resp_2")).dialect == "responses"
        kept = await responses[1].load_response("k", "resp_old")  # a response the old release stored
        assert kept.body == b'{"id": "resp_old"}' and kept.status == "completed" and not kept.streamed
        await responses[1].save_response(record("k", "resp_2", streamed=True))
        assert (await responses[0].load_response("k", "resp_2")).streamed
    finally:
        for opened in (*stores, *responses):
            await opened.close()


async def test_a_postgres_table_of_the_previous_release_is_migrated_in_place(postgres_database_url):
    dsn = "postgresql://" + postgres_database_url.partition("://")[2]
    connection = await asyncpg.connect(dsn)
    try:
        await connection.execute(
            "CREATE TABLE stored_responses (owner TEXT NOT NULL, response_id TEXT NOT NULL, status TEXT NOT NULL, "
            "background BOOLEAN NOT NULL, body BYTEA NOT NULL, history BYTEA NOT NULL, root TEXT NOT NULL, "
            "created_at DOUBLE PRECISION NOT NULL, updated_at DOUBLE PRECISION NOT NULL, "
            "expires_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (owner, response_id))")
        await connection.execute(
            "INSERT INTO stored_responses VALUES ('k', 'resp_old', 'completed', true, $1, $2, 'resp_old', 1, 1, $3)",
            zlib.compress(b'{"id": "resp_old"}'), zlib.compress(b"[]"), time.time() + 60)
    finally:
        await connection.close()
    store = PostgresResponses(postgres_database_url)
    await store.open()
    try:
        kept = await store.load_response("k", "resp_old")
        assert kept.body == b'{"id": "resp_old"}' and not kept.streamed
    finally:
        await store.close()
