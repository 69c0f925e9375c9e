"""The lease and fencing rules of the batch store, driven by hand on SQLite (migrations: tests/gateway/database)."""

from __future__ import annotations

import time

from gateway.batches.model import IN_PROGRESS, PENDING, RUNNING, SUCCEEDED
from gateway.batches.store import BatchStore
from gateway.config import Settings
from gateway.database.service import GatewayDatabase
from gateway.jobs.store import JobsDatabase


async def open_store(url: str) -> BatchStore:
    database = GatewayDatabase(Settings(database_url=url))
    await database.start()
    assert database.ready, database.error
    return BatchStore(JobsDatabase(database))


async def make_batch(store: BatchStore, lines: int) -> str:
    now = time.time()
    record = await store.create(
        {"id": "batch_abc", "owner": "key", "api": "openai", "endpoint": "/v1/chat/completions",
         "completion_window": "24h", "status": IN_PROGRESS, "total": lines, "created_at": now,
         "expires_at": now + 3600},
        [{"batch_id": "batch_abc", "line": n, "custom_id": f"c{n}", "body": "{}", "state": PENDING, "attempts": 0}
         for n in range(1, lines + 1)])
    return record.id


async def test_a_taken_over_batch_reruns_cut_lines_and_drops_the_old_replicas_results(tmp_path):
    store = await open_store(f"sqlite+aiosqlite:///{tmp_path}/jobs.db")
    try:
        batch_id = await make_batch(store, 3)
        # A's lease is already over when taken (as if A died and its lease ran out): no waiting.
        epoch_a = await store.acquire(batch_id, "replica-a", lease_seconds=-1)
        assert epoch_a == 1
        done_by_a, cut_by_a = await store.claim(batch_id, epoch_a, "/v1/chat/completions", 2)
        assert await store.finish(done_by_a, outcome=SUCCEEDED, status_code=200, response="{}", error=None)
        epoch_b = await store.acquire(batch_id, "replica-b", lease_seconds=60)
        assert epoch_b == 2
        assert await store.acquire(batch_id, "replica-c", lease_seconds=60) is None  # held
        assert not await store.renew(batch_id, "replica-a", epoch_a, 60)  # A lost it
        rerun = await store.claim(batch_id, epoch_b, "/v1/chat/completions", 10)
        assert sorted(run.line for run in rerun) == [cut_by_a.line, 3]  # the cut line again, never the done one
        assert not await store.finish(cut_by_a, outcome=SUCCEEDED, status_code=200, response="{}", error=None)
        for run in rerun:
            assert await store.finish(run, outcome=SUCCEEDED, status_code=200, response="{}", error=None)
            assert not await store.finish(run, outcome=SUCCEEDED, status_code=200, response="{}", error=None)
        record = await store.load(batch_id)
        assert (record.completed, record.failed) == (3, 0)
        assert await store.unfinished(batch_id) == 0
    finally:
        await store.db.database.stop()


async def test_a_released_lease_puts_running_lines_back(tmp_path):
    store = await open_store(f"sqlite+aiosqlite:///{tmp_path}/jobs.db")
    try:
        batch_id = await make_batch(store, 2)
        epoch = await store.acquire(batch_id, "a", lease_seconds=60)
        await store.claim(batch_id, epoch, "/v1/chat/completions", 2)
        assert (await store.line_counts(batch_id)) == {RUNNING: 2}
        await store.release(batch_id, "a", epoch)
        assert (await store.line_counts(batch_id)) == {PENDING: 2}
        assert await store.acquire(batch_id, "b", lease_seconds=60) == epoch + 1  # free at once
    finally:
        await store.db.database.stop()
