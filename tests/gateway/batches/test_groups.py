"""Results recorded and next lines claimed in groups: one transaction per group, exactly-once kept.

``LineGroups`` against a scripted writer (no database), then ``BatchStore.record_and_claim``
on SQLite, with the fencing rules of ``test_leases``.
"""

from __future__ import annotations

import asyncio

import pytest

from gateway.batches.groups import LineGroups
from gateway.batches.model import ERRORED, PENDING, RUNNING, SUCCEEDED, Finished, LineRun
from gateway.jobs.store import StoreUnavailable
from tests.gateway.batches.test_leases import make_batch, open_store

ENDPOINT = "/v1/chat/completions"
HANG_GUARD = 10.0


def run(line: int, epoch: int = 1) -> LineRun:
    return LineRun(batch_id="batch_abc", line=line, custom_id=f"c{line}", endpoint=ENDPOINT, body=b"{}",
                   epoch=epoch, attempts=1)


def done(line: int, epoch: int = 1, outcome: str = SUCCEEDED) -> Finished:
    return Finished(run(line, epoch), outcome, 200 if outcome == SUCCEEDED else 400, "{}", None, (5, 8))


class Writer:
    """Records each call (its results, how many lines it claimed); the first call waits for ``open``."""

    def __init__(self, fail_first: int = 0) -> None:
        self.calls: list[tuple[list[int], int]] = []
        self.open = asyncio.Event()
        self.entered = asyncio.Event()
        self.fail_first = fail_first
        self.next_line = 100

    async def __call__(self, results: list[Finished], count: int) -> list[LineRun]:
        self.calls.append(([item.run.line for item in results], count))
        self.entered.set()
        await self.open.wait()
        if len(self.calls) <= self.fail_first:
            raise StoreUnavailable("down")
        claimed = [run(self.next_line + n) for n in range(count)]
        self.next_line += count
        return claimed


async def test_results_that_end_while_a_group_is_written_are_the_next_group():
    writer = Writer()
    groups = LineGroups(writer)
    async with asyncio.timeout(HANG_GUARD):
        first = asyncio.create_task(groups.finish(done(1), wants_next=True))
        await writer.entered.wait()  # the first group (line 1 alone) is being written
        rest = [asyncio.create_task(groups.finish(done(line), wants_next=line != 3)) for line in (2, 3, 4)]
        while len(groups._waiting) < 3:  # (they join the queue as their tasks start)
            await asyncio.sleep(0)
        writer.open.set()
        nexts = [await first] + [await task for task in rest]
    # Two transactions for four results: the three that ended meanwhile went together, and claimed
    # one line for each slot that wanted one.
    assert writer.calls == [([1], 1), ([2, 3, 4], 2)]
    assert [None if found is None else found.line for found in nexts] == [100, 101, None, 102]
    assert groups.groups == 2


async def test_a_group_the_store_cannot_take_is_kept_and_written_again():
    writer = Writer(fail_first=1)
    pauses: list[float] = []

    async def pause(seconds: float) -> None:
        pauses.append(seconds)

    groups = LineGroups(writer, pause=pause)
    writer.open.set()
    async with asyncio.timeout(HANG_GUARD):
        found = await groups.finish(done(7), wants_next=True)
    assert writer.calls == [([7], 1), ([7], 1)] and pauses == [1.0]
    assert found is not None and found.line == 100


async def test_closing_cancels_the_waiting_slots():
    writer = Writer()
    groups = LineGroups(writer)
    slot = asyncio.create_task(groups.finish(done(1), wants_next=True))
    await asyncio.wait_for(writer.entered.wait(), HANG_GUARD)  # its group is in the transaction
    writer_task = groups.close()
    # (wait_for, not asyncio.timeout around pytest.raises: a hang must fail as TimeoutError,
    # not be cancelled into the CancelledError the test expects)
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(asyncio.shield(writer_task), HANG_GUARD)
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(asyncio.shield(slot), HANG_GUARD)


async def test_a_group_is_recorded_once_and_fenced_by_each_lines_epoch(tmp_path):
    store = await open_store(f"sqlite+aiosqlite:///{tmp_path}/jobs.db")
    try:
        batch_id = await make_batch(store, 6)
        epoch_a = await store.acquire(batch_id, "replica-a", lease_seconds=-1)  # (runs out at once)
        first = await store.claim(batch_id, epoch_a, ENDPOINT, 2)
        epoch_b = await store.acquire(batch_id, "replica-b", lease_seconds=60)  # B takes it over
        running = await store.claim(batch_id, epoch_b, ENDPOINT, 3)
        assert sorted(r.line for r in running) == [1, 2, 3]  # A's two cut lines run again
        group = [Finished(r, SUCCEEDED, 200, "{}", None, (5, 8)) for r in running[:2]]
        group.append(Finished(running[2], ERRORED, 400, "{}", None))
        group += [Finished(r, SUCCEEDED, 200, "{}", None, (5, 8)) for r in first]  # A's late results: dropped
        claimed = await store.record_and_claim(batch_id, epoch_b, ENDPOINT, group, 2)
        assert [r.line for r in claimed] == [4, 5] and all(r.epoch == epoch_b for r in claimed)
        record = await store.load(batch_id)
        assert (record.completed, record.failed, record.input_tokens, record.output_tokens) == (2, 1, 10, 16)
        assert await store.line_counts(batch_id) == {SUCCEEDED: 2, ERRORED: 1, RUNNING: 2, PENDING: 1}
        # Written again (a retry after the commit's answer was lost): nothing changes.
        assert await store.record_and_claim(batch_id, epoch_b, ENDPOINT, group[:3], 0) == []
        assert (await store.load(batch_id)).completed == 2
        # A replica that lost the batch claims nothing.
        assert await store.record_and_claim(batch_id, epoch_a, ENDPOINT, [], 5) == []
    finally:
        await store.db.database.stop()
