"""The batch lifecycle, driven by every replica: take leases, validate, run lines, cancel, expire, finalize.

Each round (every ``BATCH_POLL_SECONDS``, or at once when a line ends or a batch is created or
cancelled here) a worker renews the leases it holds, takes batches whose lease is free or ran
out (a replica died: its batches are taken over), and moves each of its batches one step:

- ``validating``: the input file is read and checked (``validation``), its lines stored;
  then ``in_progress``, or ``failed`` with every problem's line number;
- ``in_progress``: pending lines are claimed and run, at most ``BATCH_CONCURRENCY`` at once on
  this replica, each slot taking its next line as its result is recorded (results and claims
  in groups, one transaction each: ``groups``); past the completion window the lines not
  started expire;
- ``cancelling``: lines not started are cancelled, running ones finish; lines waiting for their
  key's rate limit or for their flow-control grant are woken and end cancelled (they never
  reached the engine; the grant's wait leaves the queue at once), as at expiry;
- a key revoked or expired (``callers.OwnerKeyRefused``, seen as a line starts or retries a
  rate limit): the batch ends ``failed`` (``errors``: ``invalid_api_key``), every line not
  started and every waiting line an error line (401, ``invalid_api_key``); lines already at
  the engine finish;
- then ``finalizing``: the output and error files are written and the batch ends
  (``completed``, ``cancelled``, ``expired``) with its webhook event in the same transaction.

A stopping replica gives its leases back and the lines it was running go back to pending, so
a restarted gateway (or another replica) picks them up at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable

import orjson

from gateway.batches import results
from gateway.batches.callers import OwnerKeyRefused
from gateway.batches.executor import LineExecutor, error_body
from gateway.batches.groups import LineGroups
from gateway.batches.model import (
    CANCELLING,
    ERRORED,
    EXPIRED,
    FAILED,
    FINALIZING,
    IN_PROGRESS,
    LINE_CANCELLED,
    LINE_EXPIRED,
    OPENAI,
    PENDING,
    SUCCEEDED,
    VALIDATING,
    BatchRecord,
    Finished,
    LineResult,
    LineRun,
    LineStopped,
)
from gateway.batches.store import BatchStore
from gateway.batches.usage import usage_of
from gateway.batches.validation import Checked, EnginesNotReady, check_line, split_lines
from gateway.config import Settings
from gateway.engines.state import EngineState
from gateway.failures import Failure
from gateway.files.service import Files
from gateway.http.errors import http_error
from gateway.jobs.store import StoreUnavailable

log = logging.getLogger("gateway.batches")

MAX_HELD = 16               # batches one replica holds at once (the rest wait for another replica or a slot)
# Expired files, and batches past JOBS_RETENTION_SECONDS, removed this often (or each retention period, if shorter).
SWEEP_EVERY_SECONDS = 60.0
RETRY_BASE_SECONDS = 1.0    # a line whose engine could not be used waits 1, 2, 4... s before its next try
MAX_LINE_BYTES = 8 * 1024 * 1024


class BatchWorker:
    def __init__(self, store: BatchStore, files: Files, executor: LineExecutor, engine_state: EngineState,
                 settings: Settings, *, replica: str | None = None) -> None:
        self.store = store
        self.files = files
        self.executor = executor
        self.engine_state = engine_state
        self.settings = settings
        self.replica = replica or secrets.token_hex(8)
        self.held: dict[str, int] = {}  # batch id -> the epoch of our lease
        self.tasks: dict[str, set[asyncio.Task]] = {}  # batch id -> its lines running here
        self.groups: dict[str, LineGroups] = {}  # batch id -> where its slots' results go (``groups``)
        # batch id -> set when it stops (cancel, expiry, its key refused), with what its waiting lines become
        self.stops: dict[str, tuple[asyncio.Event, Callable[[LineRun], Finished]]] = {}
        self.wake = asyncio.Event()
        # One claim at a time on this replica (the round's and the groups' of the slots): two
        # claims of one batch at once could both read a line as pending. (Replicas never claim
        # lines of one batch at once: only the lease's holder does.)
        self._claiming = asyncio.Lock()
        self._loop: asyncio.Task | None = None
        self._renewed = 0.0
        self._swept = 0.0

    @property
    def running(self) -> int:
        return sum(len(tasks) for tasks in self.tasks.values())

    def start(self) -> None:
        self._loop = asyncio.create_task(self._run(), name="batch-worker")

    async def stop(self) -> None:
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop
        every = [task for tasks in self.tasks.values() for task in tasks]
        for task in every:
            task.cancel()
        writers = [groups.close() for groups in self.groups.values()]
        self.groups.clear()
        await asyncio.gather(*every, *(writer for writer in writers if writer is not None), return_exceptions=True)
        for batch_id, epoch in list(self.held.items()):
            with contextlib.suppress(StoreUnavailable):
                await self.store.release(batch_id, self.replica, epoch)
        self.held.clear()

    async def _run(self) -> None:
        await self.store.db.wait_ready()
        while True:
            self.wake.clear()
            try:
                await self.round()
            except StoreUnavailable:
                pass
            except Exception:  # one bad round must not stop batches for good
                log.exception("batch round failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), self.settings.batch_poll_seconds)

    async def round(self) -> None:
        now = time.time()
        if now - self._renewed >= self.settings.batch_lease_seconds / 3:
            self._renewed = now
            for batch_id, epoch in list(self.held.items()):
                if not await self.store.renew(batch_id, self.replica, epoch, self.settings.batch_lease_seconds):
                    self._lose(batch_id)
        if len(self.held) < MAX_HELD:
            for batch_id in await self.store.unleased(now, MAX_HELD - len(self.held)):
                epoch = await self.store.acquire(batch_id, self.replica, self.settings.batch_lease_seconds)
                if epoch is not None:
                    self.held[batch_id] = epoch
        for batch_id, epoch in list(self.held.items()):
            try:
                await self._step(batch_id, epoch)
            except BaseException:
                # To the back of the order, and the round ends (the database may be down: every step would
                # wait on it): a batch whose step keeps failing cannot keep the others behind it from theirs.
                if self.held.pop(batch_id, None) is not None:
                    self.held[batch_id] = epoch
                raise
        if now - self._swept >= min(SWEEP_EVERY_SECONDS, self.settings.files_retention_seconds,
                                    self.settings.jobs_retention_seconds):
            self._swept = now
            await self.files.sweep()
            await self.store.prune(now - self.settings.jobs_retention_seconds)

    def _lose(self, batch_id: str) -> None:
        """Another replica holds the batch now: stop its lines here (their results would be dropped)."""
        self.held.pop(batch_id, None)
        self.stops.pop(batch_id, None)
        for task in self.tasks.pop(batch_id, set()):
            task.cancel()
        groups = self.groups.pop(batch_id, None)
        if groups is not None:
            groups.close()

    async def _step(self, batch_id: str, epoch: int) -> None:
        record = await self.store.load(batch_id)
        if record.lease_epoch != epoch:
            self._lose(batch_id)
            return
        if record.status == VALIDATING:
            await self._validate(record, epoch)
        elif record.status == IN_PROGRESS:
            await self._progress(record, epoch)
        elif record.status == CANCELLING:
            self._stop(batch_id, cancelled)
            await self.store.settle_pending(batch_id, epoch, LINE_CANCELLED)
            await self._finalize_when_idle(record, epoch, "cancelled", only_from=(CANCELLING,))
        elif record.status == FINALIZING:
            await self._end(record, epoch)
        else:
            self.held.pop(batch_id, None)
            self.groups.pop(batch_id, None)
            self.stops.pop(batch_id, None)

    # --- validating --------------------------------------------------------------------------
    async def _validate(self, record: BatchRecord, epoch: int) -> None:
        if not self.engine_state.served_models:
            return  # no engine has told its models yet: validate when one has
        checked = Checked()
        try:
            await self._check_file(record, epoch, checked)
        except EnginesNotReady:
            return
        except Failure as failure:
            if http_error(failure).status != 404:
                raise
            checked.error(None, "invalid_input_file", f"the input file {record.input_file_id} does not exist")
        if checked.error_count == 0 and checked.stored == 0:
            checked.error(None, "empty_file", "the input file has no requests")
        if checked.error_count:
            await self.store.set_lines(record.id, epoch, [], first=True)
            if await self.store.transition(record.id, epoch, only_from=(VALIDATING,), errors=checked.errors,
                                           ended_as=FAILED):
                await self.store.end(record, epoch, status=FAILED, output_file_id=None, error_file_id=None)
                self.held.pop(record.id, None)
            return
        await self.store.transition(record.id, epoch, only_from=(VALIDATING,), status=IN_PROGRESS,
                                    in_progress_at=time.time(), total=checked.stored, model=checked.model)
        self.wake.set()

    async def _check_file(self, record: BatchRecord, epoch: int, checked: Checked) -> None:
        file = await self.files.get(record.owner, record.input_file_id or "")
        seen: set[str] = set()
        first = True
        count = 0
        async for number, raw in split_lines(self.files.content(file), MAX_LINE_BYTES):
            check_line(checked, number, raw, endpoint=record.endpoint, seen=seen,
                       resolve=self.engine_state.resolve_model)
            count += 1 if raw and raw.strip() else 0
            if count > self.settings.batch_max_lines:
                checked.error(number, "batch_too_large",
                              f"the file has more than {self.settings.batch_max_lines} requests (BATCH_MAX_LINES)")
                return
            if len(checked.lines) >= 500 or checked.error_count:
                await self._store_lines(record, epoch, checked, first)
                first = False
        await self._store_lines(record, epoch, checked, first)

    async def _store_lines(self, record: BatchRecord, epoch: int, checked: Checked, first: bool) -> None:
        rows = [] if checked.error_count else [
            {"batch_id": record.id, "line": number, "custom_id": custom_id, "body": body.decode(), "state": PENDING,
             "attempts": 0} for number, custom_id, body in checked.lines]
        if rows or first:
            await self.store.set_lines(record.id, epoch, rows, first=first)
        checked.stored += len(rows)
        checked.lines.clear()

    # --- running -----------------------------------------------------------------------------
    async def _progress(self, record: BatchRecord, epoch: int) -> None:
        if record.ended_as is None and time.time() >= record.expires_at:
            # (one transaction with the lines: a cancel lands wholly before it, which wins, or after)
            if not await self.store.stop_running(record.id, epoch, ended_as=EXPIRED, outcome=LINE_EXPIRED):
                return  # cancelled (or taken over) meanwhile: the next step ends it so
            self._stop(record.id, expired)
            record.ended_as = EXPIRED
        if record.ended_as is None:
            free = self.settings.batch_concurrency - self.running
            if free > 0:
                async with self._claiming:
                    runs = await self.store.claim(record.id, epoch, record.endpoint, free)
                groups = self._groups(record, epoch) if runs else None
                for run in runs:
                    task = asyncio.create_task(self._run_line(run, record, groups), name=f"batch-line-{run.line}")
                    self.tasks.setdefault(record.id, set()).add(task)
                    task.add_done_callback(lambda done, batch_id=record.id: self._line_done(batch_id, done))
        await self._finalize_when_idle(record, epoch, record.ended_as or "completed", only_from=(IN_PROGRESS,))

    async def _finalize_when_idle(self, record: BatchRecord, epoch: int, ended_as: str, *,
                                  only_from: tuple[str, ...]) -> None:
        if self.tasks.get(record.id) or await self.store.unfinished(record.id):
            return
        if await self.store.transition(record.id, epoch, only_from=only_from, status=FINALIZING,
                                       finalizing_at=time.time(), ended_as=ended_as):
            record = await self.store.load(record.id)
            await self._end(record, epoch)

    def _line_done(self, batch_id: str, task: asyncio.Task) -> None:
        tasks = self.tasks.get(batch_id)
        if tasks is not None:
            tasks.discard(task)
            if not tasks:
                del self.tasks[batch_id]
        if not task.cancelled() and task.exception() is not None:
            log.warning("a batch line failed: %s", type(task.exception()).__name__)
        self.wake.set()

    async def _run_line(self, run: LineRun | None, record: BatchRecord, groups: LineGroups) -> None:
        """Run ``run``, then the batch's next pending lines in the same slot, until none is left to take.

        Each result goes to the store with the group of results that end about then, and the
        slot's next line comes back from the same transaction (``groups``): no round in between,
        so the engines stay as busy as ``BATCH_CONCURRENCY`` allows."""
        while run is not None:
            stop = self.stops.setdefault(record.id, (asyncio.Event(), cancelled))[0]
            try:
                done = finished(run, await self._answer(run, record.owner, stop))
            except LineStopped:
                done = self.stops.get(record.id, (stop, cancelled))[1](run)
            except OwnerKeyRefused as refusal:
                done = refused(run, refusal)
                await self._refuse_owner(record, run.epoch, refusal)
            run = await groups.finish(done, wants_next=self._takes_more(record, run.epoch))

    def _stop(self, batch_id: str, ended: Callable[[LineRun], Finished]) -> None:
        """Wake the batch's lines waiting for a rate limit: each ends as ``ended`` makes it (once)."""
        stop = self.stops.get(batch_id, (asyncio.Event(), ended))[0]
        if not stop.is_set():  # (the first reason to stop is the one its lines end with)
            self.stops[batch_id] = (stop, ended)
            stop.set()

    async def _refuse_owner(self, record: BatchRecord, epoch: int, refusal: OwnerKeyRefused) -> None:
        """The batch's key was revoked or has expired: no line of it starts again; it ends ``failed``."""
        stop, _ = self.stops.get(record.id, (None, None))
        if stop is not None and stop.is_set():
            return  # already stopped (by another of its lines, a cancel, the window)
        problem = {"code": refusal.code, "message": refusal.message, "param": None, "line": None}
        line = refused_line(record.endpoint, refusal)
        if await self.store.stop_running(record.id, epoch, ended_as=FAILED, outcome=ERRORED, errors=[problem],
                                         status_code=line.status_code, response=orjson.dumps(line.body).decode(),
                                         error=orjson.dumps(line.error).decode()):
            self._stop(record.id, lambda run: refused(run, refusal))  # (else a cancel or the window came first)
        self.wake.set()

    def _takes_more(self, record: BatchRecord, epoch: int) -> bool:
        """Whether a slot that just freed takes another line of ``record``: not when the batch is no
        longer ours, has expired, or this replica runs more than ``BATCH_CONCURRENCY`` (the store
        checks the lease, the epoch and ``in_progress`` again: a cancelled batch takes no more)."""
        return self.held.get(record.id) == epoch and time.time() < record.expires_at \
            and self.running <= self.settings.batch_concurrency

    def _groups(self, record: BatchRecord, epoch: int) -> LineGroups:
        groups = self.groups.get(record.id)
        if groups is None or groups.epoch != epoch:
            async def write(results: list[Finished], count: int) -> list[LineRun]:
                async with self._claiming:
                    return await self.store.record_and_claim(record.id, epoch, record.endpoint, results, count)
            groups = self.groups[record.id] = LineGroups(write, epoch=epoch, name=f"batch-results-{record.id}")
        return groups

    async def _answer(self, run: LineRun, owner: str, stop: asyncio.Event) -> LineResult:
        attempts = self.settings.batch_line_max_attempts
        delay = RETRY_BASE_SECONDS
        for attempt in range(1, attempts + 1):
            try:
                return await self.executor.run_line(run, owner, stop)
            except OwnerKeyRefused:
                raise  # the batch stops (``_refuse_owner``)
            except Failure as failure:  # an engine's (no status of its own), or the gateway's own
                error = http_error(failure)
                if error.status < 500 or attempt == attempts:
                    return LineResult(error.status, error_body(run.endpoint, error))
            await asyncio.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")

    # --- ending ------------------------------------------------------------------------------
    async def _end(self, record: BatchRecord, epoch: int) -> None:
        output_file_id = error_file_id = None
        if record.api == OPENAI:
            output_file_id, error_file_id = await results.write_openai_files(self.store, self.files, record)
        await self.store.end(record, epoch, status=record.ended_as or "completed", output_file_id=output_file_id,
                             error_file_id=error_file_id)
        self.held.pop(record.id, None)
        self.stops.pop(record.id, None)


def finished(run: LineRun, result: LineResult) -> Finished:
    """A line's result as the store keeps it: its outcome, its answer, its usage."""
    used = usage_of(result.body)
    return Finished(run, SUCCEEDED if 200 <= result.status_code < 300 else ERRORED, result.status_code,
                    orjson.dumps(result.body).decode(),
                    orjson.dumps(result.error).decode() if result.error is not None else None,
                    (used.prompt, used.completion, used.cached, used.reasoning))


def refused_line(endpoint: str, refusal: OwnerKeyRefused) -> LineResult:
    """A line refused for its batch's key (revoked, expired): 401 ``invalid_api_key``, as a live request's."""
    return LineResult(refusal.status, error_body(endpoint, refusal),
                      error={"code": refusal.code, "message": refusal.message})


def refused(run: LineRun, refusal: OwnerKeyRefused) -> Finished:
    return finished(run, refused_line(run.endpoint, refusal))


def cancelled(run: LineRun) -> Finished:
    return Finished(run, LINE_CANCELLED, None, None)


def expired(run: LineRun) -> Finished:
    return Finished(run, LINE_EXPIRED, None, None)
