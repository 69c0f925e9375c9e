"""The SQL of batches and their lines: records, leases, line claims and fenced results.

A replica runs a batch while it holds its lease (``lease_owner``, ``lease_until``). Taking a
batch over raises its ``lease_epoch`` and puts back to ``pending`` every line left
``running``: those runs were cut with their replica. A line is claimed under the epoch of
the lease, and its result is written only while the line is still ``running`` under that
epoch, in the same transaction as the batch's counters: a line is done once, and a result
from a replica that lost the batch is dropped.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import orjson
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from gateway.batches.model import (
    ACTIVE,
    DONE,
    ENDED,
    FINALIZING,
    OPENAI,
    PENDING,
    RUNNING,
    SUCCEEDED,
    BatchRecord,
    Finished,
    LineRun,
)
from gateway.database.tables.jobs import batch_lines, batches
from gateway.files.service import Files
from gateway.http.errors import GatewayError
from gateway.jobs import ids
from gateway.jobs.paging import Page
from gateway.jobs.store import JobsDatabase
from gateway.webhooks.events import publish

INSERT_ROWS = 500
READ_ROWS = 500


def _record(row) -> BatchRecord:
    values = dict(row._mapping)
    for name in ("lease_owner", "lease_until", "deleted_at"):
        values.pop(name, None)
    values["metadata"] = orjson.loads(values["metadata"]) if values["metadata"] else None
    values["errors"] = orjson.loads(values["errors"]) if values["errors"] else None
    return BatchRecord(**values)


class NotFound(GatewayError):
    def __init__(self, batch_id: str, *, param: str = "batch_id") -> None:
        # A list cursor names itself in the message too (Anthropic's error envelope has no param).
        where = "" if param == "batch_id" else f" (given as {param})"
        super().__init__(404, f"No such batch: {batch_id}{where}", param=param, code="batch_not_found")


class BatchStore:
    def __init__(self, db: JobsDatabase) -> None:
        self.db = db

    # --- the API's side --------------------------------------------------------------------
    async def create(self, values: dict, lines: list[dict] | None = None) -> BatchRecord:
        values = {**values, "metadata": orjson.dumps(values["metadata"]).decode() if values.get("metadata") else None}
        async with self.db.begin() as connection:
            await connection.execute(sa.insert(batches).values(**values))
            for start in range(0, len(lines or ()), INSERT_ROWS):
                await connection.execute(sa.insert(batch_lines), lines[start:start + INSERT_ROWS])
        return await self.load(values["id"])

    async def load(self, batch_id: str) -> BatchRecord:
        async with self.db.begin() as connection:
            row = (await connection.execute(sa.select(batches).where(batches.c.id == batch_id))).first()
        if row is None:
            raise NotFound(batch_id)
        return _record(row)

    async def get(self, owner: str, api: str, batch_id: str) -> BatchRecord:
        if ids.is_valid(batch_id):
            async with self.db.begin() as connection:
                row = (await connection.execute(sa.select(batches).where(
                    batches.c.id == batch_id, batches.c.owner == owner, batches.c.api == api,
                    batches.c.deleted_at.is_(None)))).first()
            if row is not None:
                return _record(row)
        raise NotFound(batch_id)

    async def list(self, owner: str, api: str, page: Page, *, before: str | None = None,
                   cursor_names: tuple[str, str] = ("after", "before")) -> tuple[list, bool]:
        """A page of the owner's batches; an unknown cursor is a 404 naming its parameter (``cursor_names``)."""
        query = sa.select(batches).where(batches.c.owner == owner, batches.c.api == api,
                                         batches.c.deleted_at.is_(None))
        key = sa.tuple_(batches.c.created_at, batches.c.id)
        descending = page.descending
        async with self.db.begin() as connection:
            for cursor, newer, name in ((page.after, False, cursor_names[0]), (before, True, cursor_names[1])):
                if cursor is None:
                    continue
                anchor = (await connection.execute(sa.select(batches.c.created_at).where(
                    batches.c.id == cursor, batches.c.owner == owner))).first()
                if anchor is None:
                    raise NotFound(cursor, param=name)
                point = sa.tuple_(anchor.created_at, cursor)
                query = query.where(key > point if newer == descending else key < point)
            if before is not None and page.after is None:
                descending = not descending  # the page just before the cursor, read from it outwards
            order = (batches.c.created_at.desc(), batches.c.id.desc()) if descending \
                else (batches.c.created_at.asc(), batches.c.id.asc())
            rows = (await connection.execute(query.order_by(*order).limit(page.limit + 1))).all()
        records = [_record(row) for row in rows[:page.limit]]
        if descending != page.descending:
            records.reverse()
        return records, len(rows) > page.limit

    async def cancel(self, owner: str, api: str, batch_id: str) -> BatchRecord:
        """``cancelling`` now, if the batch is still running and on its way to no other end: one whose
        window ran out or whose key was refused (``ended_as`` set) ends as that, whatever comes after."""
        record = await self.get(owner, api, batch_id)
        now = time.time()
        async with self.db.begin() as connection:
            await connection.execute(sa.update(batches).where(
                batches.c.id == record.id, batches.c.status.in_(("validating", "in_progress")),
                batches.c.ended_as.is_(None)).values(status="cancelling", cancelling_at=now))
        return await self.load(record.id)

    async def delete(self, owner: str, api: str, batch_id: str) -> None:
        record = await self.get(owner, api, batch_id)
        if record.status not in ENDED:
            raise GatewayError(400, f"Batch {batch_id} is still processing: cancel it and wait for it to end "
                               "before deleting it", param="batch_id")
        async with self.db.begin() as connection:
            await connection.execute(sa.update(batches).where(batches.c.id == record.id).values(
                deleted_at=time.time()))
            await connection.execute(sa.delete(batch_lines).where(batch_lines.c.batch_id == record.id))

    async def prune(self, before: float, *, limit: int = 500) -> int:
        """Remove up to ``limit`` batches that ended and were created before ``before``, or were deleted; how many.

        The batches table would otherwise keep every batch any key ever ran (``JOBS_RETENTION_SECONDS``).
        A batch's window ends a day after its creation, so one created before the retention has long
        ended; one still active is never removed, whatever its age.
        """
        async with self.db.begin() as connection:
            gone = (await connection.execute(sa.select(batches.c.id).where(sa.or_(
                batches.c.deleted_at.is_not(None),
                sa.and_(batches.c.status.in_(ENDED), batches.c.created_at < before))).limit(limit))).scalars().all()
            if gone:
                await connection.execute(sa.delete(batch_lines).where(batch_lines.c.batch_id.in_(gone)))
                await connection.execute(sa.delete(batches).where(batches.c.id.in_(gone)))
        return len(gone)

    async def stored_bytes(self, owner: str) -> int:
        """What ``owner``'s batches keep in the lines table: their requests' and answers' text.

        An OpenAI batch's lines go when it ends (its results are then its files); a Message
        Batch's are its results, kept until it is deleted. Counted with the key's files against
        ``FILES_QUOTA_BYTES_PER_KEY`` when a batch is created (``check_room``).
        """
        size = sa.func.length(batch_lines.c.body) + sa.func.coalesce(sa.func.length(batch_lines.c.response), 0)
        async with self.db.begin() as connection:
            stored = (await connection.execute(
                sa.select(sa.func.coalesce(sa.func.sum(size), 0))
                .select_from(batch_lines.join(batches, batches.c.id == batch_lines.c.batch_id))
                .where(batches.c.owner == owner))).scalar()
        return int(stored or 0)

    async def line_counts(self, batch_id: str) -> dict[str, int]:
        """Lines by outcome (``pending`` and ``running`` for those not done)."""
        async with self.db.begin() as connection:
            rows = (await connection.execute(
                sa.select(batch_lines.c.state, batch_lines.c.outcome, sa.func.count())
                .where(batch_lines.c.batch_id == batch_id)
                .group_by(batch_lines.c.state, batch_lines.c.outcome))).all()
        counts: dict[str, int] = {}
        for state, outcome, count in rows:
            name = outcome if state == DONE else state
            counts[name] = counts.get(name, 0) + count
        return counts

    async def lines(self, batch_id: str) -> AsyncIterator[list]:
        """Every line in order, ``READ_ROWS`` at a time (bounded memory for any batch)."""
        after = 0
        while True:
            async with self.db.begin() as connection:
                rows = (await connection.execute(sa.select(batch_lines).where(
                    batch_lines.c.batch_id == batch_id, batch_lines.c.line > after)
                    .order_by(batch_lines.c.line).limit(READ_ROWS))).all()
            if not rows:
                return
            yield rows
            after = rows[-1].line

    # --- leases ------------------------------------------------------------------------------
    async def unleased(self, now: float, limit: int) -> list[str]:
        async with self.db.begin() as connection:
            return list((await connection.execute(sa.select(batches.c.id).where(
                batches.c.status.in_(ACTIVE), batches.c.deleted_at.is_(None),
                sa.or_(batches.c.lease_owner.is_(None), batches.c.lease_until < now))
                .order_by(batches.c.created_at).limit(limit))).scalars().all())

    async def acquire(self, batch_id: str, replica: str, lease_seconds: float) -> int | None:
        """Take the batch's lease if free or run out: its new epoch, or None if another replica holds it."""
        now = time.time()
        async with self.db.begin() as connection:
            taken = (await connection.execute(sa.update(batches).where(
                batches.c.id == batch_id, batches.c.status.in_(ACTIVE),
                sa.or_(batches.c.lease_owner.is_(None), batches.c.lease_until < now)).values(
                lease_owner=replica, lease_until=now + lease_seconds,
                lease_epoch=batches.c.lease_epoch + 1))).rowcount
            if not taken:
                return None
            epoch = (await connection.execute(sa.select(batches.c.lease_epoch).where(
                batches.c.id == batch_id))).scalar()
            await connection.execute(sa.update(batch_lines).where(
                batch_lines.c.batch_id == batch_id, batch_lines.c.state == RUNNING).values(state=PENDING, epoch=None))
        return epoch

    async def renew(self, batch_id: str, replica: str, epoch: int, lease_seconds: float) -> bool:
        async with self.db.begin() as connection:
            return bool((await connection.execute(sa.update(batches).where(
                batches.c.id == batch_id, batches.c.lease_owner == replica, batches.c.lease_epoch == epoch).values(
                lease_until=time.time() + lease_seconds))).rowcount)

    async def release(self, batch_id: str, replica: str, epoch: int) -> None:
        """Give the lease up (a stopping replica): lines it was running go back to pending."""
        async with self.db.begin() as connection:
            released = (await connection.execute(sa.update(batches).where(
                batches.c.id == batch_id, batches.c.lease_owner == replica, batches.c.lease_epoch == epoch).values(
                lease_owner=None, lease_until=None))).rowcount
            if released:
                await connection.execute(sa.update(batch_lines).where(
                    batch_lines.c.batch_id == batch_id, batch_lines.c.state == RUNNING,
                    batch_lines.c.epoch == epoch).values(state=PENDING, epoch=None))

    @staticmethod
    def _held(batch_id: str, epoch: int):
        return sa.and_(batches.c.id == batch_id, batches.c.lease_epoch == epoch)

    # --- the lifecycle -----------------------------------------------------------------------
    async def set_lines(self, batch_id: str, epoch: int, lines: list[dict], *, first: bool) -> None:
        async with self.db.begin() as connection:
            if first:
                await connection.execute(sa.delete(batch_lines).where(batch_lines.c.batch_id == batch_id))
            if lines:
                await connection.execute(sa.insert(batch_lines), lines)

    async def transition(self, batch_id: str, epoch: int, *, only_from: tuple[str, ...], **values) -> bool:
        """Update the batch if this replica still holds it under ``epoch`` and its status is one of ``only_from``."""
        if "errors" in values and values["errors"] is not None:
            values["errors"] = orjson.dumps(values["errors"]).decode()
        async with self.db.begin() as connection:
            return bool((await connection.execute(sa.update(batches).where(
                self._held(batch_id, epoch), batches.c.status.in_(only_from)).values(**values))).rowcount)

    async def claim(self, batch_id: str, epoch: int, endpoint: str, count: int) -> list[LineRun]:
        """Up to ``count`` pending lines, now ``running`` under ``epoch`` (none unless the batch is
        held and in progress).

        Callers on one replica claim one at a time (``BatchWorker._claiming``): two claims of one
        batch at once could both read a line as pending."""
        async with self.db.begin() as connection:
            return await self._claim(connection, batch_id, epoch, endpoint, count)

    async def finish(self, run: LineRun, *, outcome: str, status_code: int | None, response: str | None,
                     error: str | None, usage: tuple[int, int, int, int] = (0, 0, 0, 0)) -> bool:
        """Record a line's result, once: False when the line is no longer this run's (taken over, done)."""
        async with self.db.begin() as connection:
            return bool(await self._record(connection, [Finished(run, outcome, status_code, response, error, usage)]))

    async def record_and_claim(self, batch_id: str, epoch: int, endpoint: str, finished: list[Finished],
                               count: int) -> list[LineRun]:
        """A group of results recorded and up to ``count`` next lines claimed: one transaction (``groups``)."""
        async with self.db.begin() as connection:
            await self._record(connection, finished)
            return await self._claim(connection, batch_id, epoch, endpoint, count) if count else []

    async def _claim(self, connection: AsyncConnection, batch_id: str, epoch: int, endpoint: str,
                     count: int) -> list[LineRun]:
        numbers = (await connection.execute(sa.select(batch_lines.c.line).where(
            batch_lines.c.batch_id == batch_id, batch_lines.c.state == PENDING)
            .order_by(batch_lines.c.line).limit(count))).scalars().all()
        if not numbers:
            return []
        held = sa.select(batches.c.id).where(self._held(batch_id, epoch), batches.c.status == "in_progress")
        await connection.execute(sa.update(batch_lines).where(
            batch_lines.c.batch_id == batch_id, batch_lines.c.line.in_(numbers), batch_lines.c.state == PENDING,
            sa.exists(held)).values(state=RUNNING, epoch=epoch, attempts=batch_lines.c.attempts + 1))
        rows = (await connection.execute(sa.select(batch_lines).where(
            batch_lines.c.batch_id == batch_id, batch_lines.c.line.in_(numbers), batch_lines.c.state == RUNNING,
            batch_lines.c.epoch == epoch))).all()
        return [LineRun(batch_id=batch_id, line=row.line, custom_id=row.custom_id, endpoint=endpoint,
                        body=row.body.encode(), epoch=epoch, attempts=row.attempts) for row in rows]

    @staticmethod
    async def _record(connection: AsyncConnection, finished: list[Finished]) -> int:
        """Each result written while its line is still ``running`` under its run's epoch, then the
        batches' counters once: how many were written (the others' runs were taken over)."""
        totals: dict[str, list[int]] = {}  # batch id -> [completed, failed, then the four token counts of usage]
        now = time.time()
        for item in finished:
            run = item.run
            done = (await connection.execute(sa.update(batch_lines).where(
                batch_lines.c.batch_id == run.batch_id, batch_lines.c.line == run.line,
                batch_lines.c.state == RUNNING, batch_lines.c.epoch == run.epoch).values(
                state=DONE, outcome=item.outcome, status_code=item.status_code, response=item.response,
                error=item.error, finished_at=now))).rowcount
            if done:
                total = totals.setdefault(run.batch_id, [0, 0, 0, 0, 0, 0])
                total[0 if item.outcome == SUCCEEDED else 1] += 1
                for index, tokens in enumerate(item.usage, start=2):
                    total[index] += tokens
        for batch_id, (completed, failed, prompt, output, cached, reasoning) in totals.items():
            await connection.execute(sa.update(batches).where(batches.c.id == batch_id).values(
                completed=batches.c.completed + completed, failed=batches.c.failed + failed,
                input_tokens=batches.c.input_tokens + prompt, output_tokens=batches.c.output_tokens + output,
                cached_tokens=batches.c.cached_tokens + cached,
                reasoning_tokens=batches.c.reasoning_tokens + reasoning))
        return sum(total[0] + total[1] for total in totals.values())

    async def settle_pending(self, batch_id: str, epoch: int, outcome: str, *, status_code: int | None = None,
                             response: str | None = None, error: str | None = None) -> int:
        """Every line not started yet ends as ``outcome`` (cancelled, expired; errored, with the
        answer given: the key was refused): how many."""
        async with self.db.begin() as connection:
            if not (await connection.execute(sa.select(batches.c.id).where(self._held(batch_id, epoch)))).first():
                return 0
            return await self._settle_pending(connection, batch_id, outcome, status_code=status_code,
                                              response=response, error=error)

    async def stop_running(self, batch_id: str, epoch: int, *, ended_as: str, outcome: str,
                           errors: list | None = None, status_code: int | None = None, response: str | None = None,
                           error: str | None = None) -> bool:
        """The batch, ``in_progress`` on its way to no end yet, now ending as ``ended_as`` (its window
        ran out, its key was refused), and its lines not started ``outcome``: one transaction, so a
        cancel (``cancel``: only while ``ended_as`` is unset) either comes first and this does nothing,
        or comes after and is refused. Between two transactions a cancel could land after the lines
        were settled and turn an expired batch into a cancelled one. False if it was no longer so."""
        values: dict = {"ended_as": ended_as}
        if errors is not None:
            values["errors"] = orjson.dumps(errors).decode()
        async with self.db.begin() as connection:
            if not (await connection.execute(sa.update(batches).where(
                    self._held(batch_id, epoch), batches.c.status == "in_progress",
                    batches.c.ended_as.is_(None)).values(**values))).rowcount:
                return False
            await self._settle_pending(connection, batch_id, outcome, status_code=status_code, response=response,
                                       error=error)
        return True

    @staticmethod
    async def _settle_pending(connection: AsyncConnection, batch_id: str, outcome: str, *, status_code: int | None,
                              response: str | None, error: str | None) -> int:
        settled = (await connection.execute(sa.update(batch_lines).where(
            batch_lines.c.batch_id == batch_id, batch_lines.c.state == PENDING).values(
            state=DONE, outcome=outcome, status_code=status_code, response=response, error=error,
            finished_at=time.time()))).rowcount
        if settled:
            await connection.execute(sa.update(batches).where(batches.c.id == batch_id).values(
                failed=batches.c.failed + settled))
        return settled

    async def unfinished(self, batch_id: str) -> int:
        async with self.db.begin() as connection:
            return int((await connection.execute(sa.select(sa.func.count()).where(
                batch_lines.c.batch_id == batch_id, batch_lines.c.state != DONE))).scalar() or 0)

    async def end(self, record: BatchRecord, epoch: int, *, status: str, output_file_id: str | None,
                  error_file_id: str | None, event: bool = True) -> bool:
        """The batch's final status, its files, its lease given up and its webhook event: one transaction."""
        now = time.time()
        async with self.db.begin() as connection:
            ended = (await connection.execute(sa.update(batches).where(
                self._held(record.id, epoch), batches.c.status.in_((FINALIZING, "validating"))).values(
                {"status": status, f"{status}_at": now, "output_file_id": output_file_id,
                 "error_file_id": error_file_id, "lease_owner": None, "lease_until": None}))).rowcount
            if ended and record.api == OPENAI:
                # Its results are in its output and error files now (written before this): the
                # lines, a copy of the input with every answer, would only stay as storage nobody
                # reads or counts, however many batches a key ran or cancelled.
                await connection.execute(sa.delete(batch_lines).where(batch_lines.c.batch_id == record.id))
            if ended and event:
                await _publish(connection, record, status)
        return bool(ended)


async def check_room(files: Files, store: BatchStore, owner: str, adding: int, *, param: str) -> None:
    """Refuse a new batch whose copy of ``adding`` bytes would take the key past its storage quota.

    A key keeps its files and its batches' lines; ``FILES_QUOTA_BYTES_PER_KEY`` bounds both
    (400 ``storage_quota_exceeded``, as an upload past it), so no key can grow the database
    without bound by creating (and cancelling) batches, each a copy of its input.
    """
    used = await files.used_bytes(owner) + await store.stored_bytes(owner)
    if used + adding > files.quota_bytes:
        raise GatewayError(400, f"this key's storage is full ({files.quota_bytes} bytes, FILES_QUOTA_BYTES_PER_KEY, "
                                f"for its files and its batches' requests and results; {used} used, this batch "
                                f"needs {adding} more): delete files or ended Message Batches, or wait for running "
                                "batches to end", param=param, code="storage_quota_exceeded")


async def _publish(connection: AsyncConnection, record: BatchRecord, status: str) -> None:
    await publish(connection, owner=record.owner, event_type=f"batch.{status}", object_id=record.id)
