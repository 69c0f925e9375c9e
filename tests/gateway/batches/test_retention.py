"""The jobs tables stay bounded: ended batches and finished webhook deliveries go after JOBS_RETENTION_SECONDS,
a deleted batch and a deleted endpoint's deliveries at once; nothing active or pending is ever removed."""

from __future__ import annotations

import time

import pytest
import sqlalchemy as sa

from gateway.batches.model import CANCELLED, COMPLETED, IN_PROGRESS, PENDING
from gateway.batches.store import BatchStore
from gateway.database.tables.jobs import batch_lines, batches, webhook_endpoints, webhook_outbox
from gateway.jobs.store import JobsDatabase
from gateway.webhooks.delivery import PRUNE_ROWS, Deliverer
from gateway.webhooks.endpoints import Endpoints
from tests.gateway.batches.conftest import database
from tests.support.gateway import running_gateway
from tests.support.waiting import until

DAY = 24 * 3600.0


async def add_batch(store: BatchStore, batch_id: str, *, status: str, created_at: float, deleted: bool = False) -> None:
    await store.create(
        {"id": batch_id, "owner": "key", "api": "anthropic", "endpoint": "/v1/messages", "completion_window": "24h",
         "status": status, "total": 1, "created_at": created_at, "expires_at": created_at + DAY,
         "deleted_at": created_at + 1 if deleted else None},
        [{"batch_id": batch_id, "line": 1, "custom_id": "c1", "body": "{}", "state": PENDING, "attempts": 0}])


async def ids_in(jobs: JobsDatabase, table: sa.Table) -> set[str]:
    async with jobs.begin() as connection:
        return set((await connection.execute(sa.select(table.c.id))).scalars())


async def add_delivery(jobs: JobsDatabase, delivery_id: str, *, state: str, created_at: float,
                       endpoint_id: str = "we_1") -> None:
    async with jobs.begin() as connection:
        await connection.execute(sa.insert(webhook_outbox).values(
            id=delivery_id, event_id="evt_" + delivery_id, endpoint_id=endpoint_id, event_type="batch.completed",
            payload="{}", state=state, attempts=1, next_attempt_at=created_at, created_at=created_at))


def deliverer(jobs: JobsDatabase) -> Deliverer:
    return Deliverer(jobs, allowed=[], timeout=1, max_attempts=3, backoff=1, concurrency=1, poll_seconds=1,
                     retention_seconds=30 * DAY)


async def test_ended_batches_past_the_retention_and_deleted_ones_go_with_their_lines(jobs):
    store = BatchStore(jobs)
    now = time.time()
    await add_batch(store, "old_completed", status=COMPLETED, created_at=now - 31 * DAY)
    await add_batch(store, "old_cancelled", status=CANCELLED, created_at=now - 40 * DAY)
    await add_batch(store, "old_but_running", status=IN_PROGRESS, created_at=now - 31 * DAY)
    await add_batch(store, "recent_completed", status=COMPLETED, created_at=now - 29 * DAY)
    await add_batch(store, "deleted_today", status=COMPLETED, created_at=now - 60, deleted=True)

    assert await store.prune(now - 30 * DAY) == 3

    kept = {"old_but_running", "recent_completed"}
    assert await ids_in(jobs, batches) == kept
    async with jobs.begin() as connection:
        lines_of = set((await connection.execute(sa.select(batch_lines.c.batch_id))).scalars())
    assert lines_of == kept
    assert await store.prune(now - 30 * DAY) == 0


async def test_a_prune_round_removes_a_bounded_number_of_batches(jobs):
    store = BatchStore(jobs)
    now = time.time()
    for n in range(5):
        await add_batch(store, f"b{n}", status=COMPLETED, created_at=now - 31 * DAY)
    assert await store.prune(now - 30 * DAY, limit=2) == 2
    assert await store.prune(now - 30 * DAY, limit=2) == 2
    assert await store.prune(now - 30 * DAY, limit=2) == 1
    assert await ids_in(jobs, batches) == set()


async def test_finished_deliveries_past_the_retention_go_pending_ones_stay(jobs):
    now = time.time()
    await add_delivery(jobs, "old_delivered", state="delivered", created_at=now - 31 * DAY)
    await add_delivery(jobs, "old_failed", state="failed", created_at=now - 31 * DAY)
    await add_delivery(jobs, "old_pending", state="pending", created_at=now - 31 * DAY)
    await add_delivery(jobs, "new_delivered", state="delivered", created_at=now - 60)

    assert await deliverer(jobs).prune(now - 30 * DAY) == 2
    assert await ids_in(jobs, webhook_outbox) == {"old_pending", "new_delivered"}


async def test_a_prune_round_of_deliveries_is_bounded(jobs):
    now = time.time()
    for n in range(PRUNE_ROWS + 3):
        await add_delivery(jobs, f"d{n}", state="delivered", created_at=now - 31 * DAY)
    assert await deliverer(jobs).prune(now - 30 * DAY) == PRUNE_ROWS
    assert await deliverer(jobs).prune(now - 30 * DAY) == 3


async def test_deleting_an_endpoint_removes_its_deliveries_only(jobs):
    now = time.time()
    async with jobs.begin() as connection:
        for endpoint_id in ("we_1", "we_2"):
            await connection.execute(sa.insert(webhook_endpoints).values(
                id=endpoint_id, key_id="key", url="https://example.com/hook", secret="whsec_x",
                events='["batch.completed"]', created_at=now))
    await add_delivery(jobs, "to_1_pending", state="pending", created_at=now, endpoint_id="we_1")
    await add_delivery(jobs, "to_1_delivered", state="delivered", created_at=now, endpoint_id="we_1")
    await add_delivery(jobs, "to_2", state="pending", created_at=now, endpoint_id="we_2")

    await Endpoints(jobs, allowed=[], configured_keys=frozenset({"key"})).delete("we_1")

    assert await ids_in(jobs, webhook_outbox) == {"to_2"}


async def test_a_running_gateway_sweeps_both_tables(jobs_settings):
    """The worker's and the deliverer's rounds call the prunes above with JOBS_RETENTION_SECONDS."""
    settings = jobs_settings(jobs_retention_seconds=2.0)  # each sweeps at least every 2 s
    async with running_gateway(settings):
        connection = database(settings)
        await until(lambda: connection.execute(
            "select count(*) from sqlite_master where name = 'gateway_webhook_outbox'").fetchone()[0] == 1,
            timeout=60, what="the migrated database", interval=0.05)
        long_ago = time.time() - 31 * DAY
        with connection:
            connection.execute(
                "insert into gateway_batches (id, owner, api, endpoint, completion_window, status, created_at, "
                "expires_at) values ('old', 'key', 'openai', '/v1/chat/completions', '24h', 'completed', ?, ?)",
                (long_ago, long_ago + DAY))
            connection.execute(
                "insert into gateway_webhook_outbox (id, event_id, endpoint_id, event_type, payload, state, "
                "next_attempt_at, created_at) values ('old', 'evt_old', 'we_1', 'batch.completed', '{}', "
                "'delivered', ?, ?)", (long_ago, long_ago))

        def both_gone() -> bool:
            return sum(connection.execute(f"select count(*) from {table}").fetchone()[0]
                       for table in ("gateway_batches", "gateway_webhook_outbox")) == 0

        await until(both_gone, timeout=30, what="the old rows swept", interval=0.1)
        connection.close()
