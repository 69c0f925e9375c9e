"""A batch's slots record their results and take their next lines together: one transaction per group.

A line used to cost two transactions of its own, one after the other under the replica's claim
lock: its result, then the claim of its slot's next line. With SQLite that was about 10 ms of
serialised store time per line, a ceiling near 100 lines/s that the fake engine showed, and
0.74x of direct on the real one (bench/results/batches.md). Now a slot hands its result to the
batch's ``LineGroups`` and waits; one writer takes every result waiting, records them (each
still fenced by its line's epoch: ``BatchStore._record``) and claims as many pending lines as
those slots want, in one transaction, and gives each slot its next line. Results that arrive
while a group is written make the next group, so groups grow with the load and a lone line
waits for no one (group commit).

Exactly-once is unchanged: a result is written only while its line is ``running`` under the
run's epoch, and a line is claimed only while the batch is held and in progress. A result the
store cannot take yet is kept and written again later; one lost with its replica leaves its
line ``running``, so the replica that takes the batch over runs it again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from gateway.batches.model import Finished, LineRun
from gateway.jobs.store import StoreUnavailable

RETRY_BASE_SECONDS = 1.0  # the store could not take a group: it is written again 1, 2, 4... s later
RETRY_MAX_SECONDS = 30.0

Write = Callable[[list[Finished], int], Awaitable[list[LineRun]]]


class LineGroups:
    def __init__(self, write: Write, *, epoch: int = 0, name: str = "batch-results",
                 pause: Callable[[float], Awaitable[object]] = asyncio.sleep) -> None:
        self.epoch = epoch  # the lease's, under which its lines run
        self._write = write  # records the results and claims that many lines, in one transaction
        self._name = name
        self._pause = pause
        self._waiting: list[tuple[Finished, bool, asyncio.Future]] = []
        self._writing: list[tuple[Finished, bool, asyncio.Future]] = []  # the group in the transaction
        self._writer: asyncio.Task | None = None
        self.groups = 0  # transactions written (for the tests)

    async def finish(self, finished: Finished, *, wants_next: bool) -> LineRun | None:
        """Record ``finished`` with the group it lands in; the slot's next line (None: nothing to take)."""
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._waiting.append((finished, wants_next, future))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._drain(), name=self._name)
        return await future

    async def _drain(self) -> None:
        delay = RETRY_BASE_SECONDS
        while self._waiting:
            group, self._waiting = self._waiting, []
            self._writing = group
            # A slot is only cancelled when its lines go back to pending anyway (the replica stops
            # and gives its lease back, or lost it): lines claimed for it are reset with the rest.
            wanted = sum(1 for _, wants, future in group if wants and not future.done())
            try:
                runs = await self._write([finished for finished, _, _ in group], wanted)
            except StoreUnavailable:
                self._waiting = group + self._waiting  # kept until the store takes them
                await self._pause(delay)
                delay = min(delay * 2, RETRY_MAX_SECONDS)
                continue
            delay = RETRY_BASE_SECONDS
            self.groups += 1
            handed = iter(runs)
            for _, wants, future in group:
                if not future.done():
                    future.set_result(next(handed, None) if wants else None)
            self._writing = []

    def close(self) -> asyncio.Task | None:
        """Stop writing (the replica stops or lost the batch): what is not written runs again where
        the batch goes next. The writer, cancelled (await it before giving the lease back)."""
        # The slots of the group being written wait too: cancelling only the writer would leave them
        # waiting for an answer that never comes.
        for _, _, future in self._writing + self._waiting:
            future.cancel()
        self._waiting.clear()
        self._writing = []
        if self._writer is not None:
            self._writer.cancel()
        return self._writer
