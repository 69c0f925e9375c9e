"""The SQLite session store's transactions survive a call cancelled halfway (a store timeout, a shutdown)."""

from __future__ import annotations

import asyncio

import pytest

from gateway.sessions.store.sqlite import SQLiteStore


@pytest.fixture
async def store(tmp_path):
    store = SQLiteStore(f"sqlite+aiosqlite:///{tmp_path}/sessions.db", replica="here", lease_seconds=30,
                        poll_interval=1)
    await store.open()
    yield store
    await store.close()


@pytest.mark.parametrize("statement", ["BEGIN", "COMMIT"])
async def test_a_call_cancelled_while_its_begin_or_commit_is_on_the_way_leaves_the_store_writable(store, statement):
    real = store._writer.execute
    sent = asyncio.Event()

    def execute(sql, *args):
        if not sql.startswith(statement) or sent.is_set():
            return real(sql, *args)

        async def unanswered():
            await real(sql, *args)  # the statement runs in aiosqlite's thread...
            sent.set()
            await asyncio.Event().wait()  # ...but its caller is cancelled before it hears back

        return unanswered()

    store._writer.execute = execute
    call = asyncio.create_task(store.retire())
    async with asyncio.timeout(10):
        await sent.wait()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    store._writer.execute = real
    await store.retire()  # "cannot start a transaction within a transaction" before the fix
    assert not store._writer.in_transaction
