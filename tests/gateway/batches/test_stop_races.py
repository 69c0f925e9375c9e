"""A cancel racing a batch's expiry: whichever lands first decides the end, lines and batch alike.

The worker's expiry settled the lines not started (``expired``) in one transaction and
recorded the batch's end in another; a cancel landing between them made the batch
``cancelling`` and then ``cancelled``, its lines ``expired``: the batch said one end, its
error file another. The race is driven by hand, without timing: the cancel is made right
after each of the worker's store calls in turn, one case per call.
"""

from __future__ import annotations

import inspect
import time

import pytest

from gateway.batches.model import ANTHROPIC, IN_PROGRESS, LINE_CANCELLED, LINE_EXPIRED, PENDING
from gateway.batches.worker import BatchWorker
from gateway.config import Settings
from tests.gateway.batches.test_leases import open_store

OWNER = "key"


class CancelAfter:
    """The batch store, with the batch cancelled (as the API does) right after its ``n``-th call."""

    def __init__(self, store, batch_id: str, n: int) -> None:
        self._store, self._batch_id, self._n = store, batch_id, n
        self.calls: list[str] = []
        self.cancelled_after: str | None = None

    def __getattr__(self, name: str):
        found = getattr(self._store, name)
        if not inspect.iscoroutinefunction(found):
            return found

        async def call(*args, **kwargs):
            result = await found(*args, **kwargs)
            self.calls.append(name)
            if len(self.calls) == self._n:
                self.cancelled_after = name
                await self._store.cancel(OWNER, ANTHROPIC, self._batch_id)
            return result
        return call


async def expired_batch(store, lines: int) -> str:
    now = time.time()
    record = await store.create(
        {"id": "batch_race", "owner": OWNER, "api": ANTHROPIC, "endpoint": "/v1/messages",
         "completion_window": "24h", "status": IN_PROGRESS, "total": lines, "created_at": now - 10,
         "expires_at": now - 1},
        [{"batch_id": "batch_race", "line": n, "custom_id": f"c{n}", "body": "{}", "state": PENDING, "attempts": 0}
         for n in range(1, lines + 1)])
    return record.id


@pytest.mark.parametrize("n", range(1, 7))
async def test_a_cancel_landing_after_any_store_call_of_the_expiry_ends_batch_and_lines_alike(tmp_path, n):
    store = await open_store(f"sqlite+aiosqlite:///{tmp_path}/jobs.db")
    try:
        batch_id = await expired_batch(store, 3)
        epoch = await store.acquire(batch_id, "replica", lease_seconds=60)
        racing = CancelAfter(store, batch_id, n)
        worker = BatchWorker(racing, None, None, None, Settings(), replica="replica")
        worker.held[batch_id] = epoch
        for _ in range(5):  # each step moves the batch on; three reach its end
            await worker._step(batch_id, epoch)
            record = await store.load(batch_id)
            if record.status in ("expired", "cancelled"):
                break
        assert record.status in ("expired", "cancelled"), (record.status, racing.calls)
        lines = {LINE_EXPIRED: "expired", LINE_CANCELLED: "cancelled"}
        outcomes = {lines[outcome] for outcome in await store.line_counts(batch_id)}
        assert outcomes == {record.status}, (record.status, outcomes, racing.cancelled_after, racing.calls)
        assert record.cancelling_at is None or record.status == "cancelled", record
    finally:
        await store.db.database.stop()
