"""The SQLite session store's transactions: they survive a call cancelled halfway (a store timeout, a
shutdown), and another connection writing to the same file never fails them."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from gateway.sessions.frames import pack
from gateway.sessions.store.base import Batch, Chunk, NewGeneration


@pytest.mark.parametrize("statement", ["BEGIN", "COMMIT"])
async def test_a_call_cancelled_while_its_begin_or_commit_is_on_the_way_leaves_the_store_writable(
        sqlite_store, statement):
    real = sqlite_store._writer.execute
    sent = asyncio.Event()

    def execute(sql, *args):
        if not sql.startswith(statement) or sent.is_set():
            return real(sql, *args)

        async def unanswered():
            await real(sql, *args)  # the statement runs in aiosqlite's thread...
            sent.set()
            await asyncio.Event().wait()  # ...but its caller is cancelled before it hears back

        return unanswered()

    sqlite_store._writer.execute = execute
    call = asyncio.create_task(sqlite_store.retire())
    async with asyncio.timeout(10):
        await sent.wait()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    sqlite_store._writer.execute = real
    await sqlite_store.retire()  # "cannot start a transaction within a transaction" before the fix
    assert not sqlite_store._writer.in_transaction


async def test_a_flush_meeting_another_connections_write_is_not_refused_with_database_is_locked(sqlite_store):
    """The file is shared: the usage ledger, batches and stored responses write to it on connections
    of their own. A flush used to open a deferred BEGIN and read first (its fencing SELECT); when
    another connection wrote before the flush's first write, SQLite refused that write at once with
    "database is locked" (a read snapshot cannot wait for the lock, nor write over a newer commit),
    and the events stayed unpersisted. Here the other connection tries to write exactly then."""
    await sqlite_store.claim(NewGeneration("owner", "s", 7, True))  # stored: the flush starts with its SELECT
    other = sqlite3.connect(sqlite_store.path, isolation_level=None, timeout=0)  # (0: never waits, nothing hangs)
    other_wrote: list[bool] = []
    real = sqlite_store._writer.executemany

    def executemany(sql, rows):
        if sql.startswith("INSERT OR IGNORE INTO stream_chunks") and not other_wrote:
            try:  # between the flush's read and its first write
                other.execute("BEGIN IMMEDIATE")
                other.execute("CREATE TABLE IF NOT EXISTS usage_elsewhere (n INTEGER)")
                other.execute("COMMIT")
                other_wrote.append(True)
            except sqlite3.OperationalError:
                other_wrote.append(False)  # the flush holds the write lock: the other writer waits its turn
        return real(sql, rows)

    sqlite_store._writer.executemany = executemany
    event = b"id: s:0\ndata: {}\n\n"
    try:
        async with asyncio.timeout(30):
            fenced = await sqlite_store.write(Batch(chunks=[Chunk(7, 0, 0, pack(event))]))
            assert fenced == set()
            assert await sqlite_store.read_frames(7, 0) == [event]
    finally:
        sqlite_store._writer.executemany = real
        other.close()
    assert other_wrote == [False]


async def test_the_writer_writing_a_claimed_generation_again_keeps_its_follower_lease(sqlite_store):
    # A named generation is claimed (its row written), a follower on another replica takes its
    # listener lease, then the producer's writer flushes the generation's row again: the lease
    # stays (it was wiped: the producer then stopped a generation that was being followed).
    claimed = NewGeneration("owner", "kept", 8, True)
    await sqlite_store.claim(claimed)
    await sqlite_store.touch_listener(8, 30)
    await sqlite_store.write(Batch(generations=[claimed]))
    assert await sqlite_store.has_listener(8)
    # A new generation of the same session still replaces the row, lease included.
    await sqlite_store.write(Batch(generations=[NewGeneration("owner", "kept", 9, True)]))
    assert not await sqlite_store.has_listener(9)
