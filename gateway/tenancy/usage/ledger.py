"""Recording usage off the request path: sums in memory, written to the database in batches.

``record`` is synchronous and never waits: it adds the request's tokens to the row of its
(hour, key, team, end user, model, route) in memory (a dict lookup and six additions). Every
``USAGE_FLUSH_SECONDS`` a background task writes all pending rows in one transaction, each
an upsert that adds to the stored sums, so replicas writing the same row add up.

Bounded: at most ``USAGE_BUFFER_ROWS`` distinct rows wait in memory. While the database is
down, the rows stay (aggregated, so a busy key still takes one row per hour and model) and
are retried at every flush; a record that would need a new row beyond the bound is dropped
and counted (``dropped``). A row the database refuses for its values (``database.errors``: a
data error, which no retry mends) would otherwise hold the whole batch back forever: the batch
is then written row by row, and only the refused rows are dropped (counted in ``refused``).
What a dead database or a killed process can lose: the rows not yet written, at most
``USAGE_BUFFER_ROWS`` rows, and in normal operation at most one flush interval of usage.
No request ever waits on the database for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import Callable

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.database.errors import UNWRAPPED, refused_value
from gateway.database.tables.tenancy import NO_TEAM, NO_USER, usage
from gateway.tenancy.model import utcnow
from gateway.tenancy.usage.prices import PriceTable, cost

log = logging.getLogger("gateway.usage")

ROW_KEY = ("hour", "key_id", "team_id", "end_user", "model", "route")
SUMS = ("requests", "prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens", "cost")
FLUSH_TIMEOUT_SECONDS = 10.0
MAX_LABEL = 128  # end user ids and routes beyond this are cut (the columns' width)


class UsageLedger:
    def __init__(self, engine: AsyncEngine, *, prices: PriceTable | None = None, flush_seconds: float = 2.0,
                 max_rows: int = 50_000, clock: Callable[[], dt.datetime] = utcnow) -> None:
        self.engine = engine
        self.prices = prices or {}
        self.flush_seconds = flush_seconds
        self.max_rows = max_rows
        self.clock = clock
        self.dropped = 0
        self.refused = 0  # rows the database refused for their values (requests in them)
        self.failed_flushes = 0
        self._pending: dict[tuple, list] = {}
        self._task: asyncio.Task | None = None
        self._stopping = asyncio.Event()
        self._flushing = asyncio.Lock()

    def record(self, *, key_id: str, model: str, route: str, team_id: str | None = None,
               end_user: str | None = None, prompt_tokens: int = 0, completion_tokens: int = 0,
               cached_tokens: int = 0, reasoning_tokens: int = 0, requests: int = 1) -> None:
        """Count one request's usage (as the client received it); never blocks, never raises for the DB."""
        hour = self.clock().replace(minute=0, second=0, microsecond=0)
        row_key = (hour, key_id, team_id or NO_TEAM, (end_user or NO_USER)[:MAX_LABEL], model[:200],
                   route[:MAX_LABEL])
        row = self._pending.get(row_key)
        if row is None:
            if len(self._pending) >= self.max_rows:
                self.dropped += 1
                return
            row = self._pending[row_key] = [0, 0, 0, 0, 0, 0.0]
        row[0] += requests
        row[1] += prompt_tokens
        row[2] += completion_tokens
        row[3] += cached_tokens
        row[4] += reasoning_tokens
        row[5] += cost(self.prices, model, prompt_tokens=prompt_tokens, cached_tokens=cached_tokens,
                       completion_tokens=completion_tokens)

    @property
    def pending_rows(self) -> int:
        return len(self._pending)

    async def flush(self) -> bool:
        """Write what is pending in one transaction; on failure it stays pending. True if written."""
        async with self._flushing:
            batch, self._pending = self._pending, {}
            if not batch:
                return True
            try:
                async with asyncio.timeout(FLUSH_TIMEOUT_SECONDS):
                    await self._write(batch)
            except (SQLAlchemyError, OSError, TimeoutError, *UNWRAPPED) as exc:
                if refused_value(exc) is not None:
                    return await self._write_each(batch)
                self._failed(batch, exc)
                return False
            return True

    async def _write_each(self, batch: dict[tuple, list]) -> bool:
        """A batch with a refused row: each row alone, the refused ones dropped. Bounded like one flush:
        past ``FLUSH_TIMEOUT_SECONDS``, or at the first failure that is no refusal (the database
        failing), the rows not written yet wait for the next flush (which goes on from them)."""
        rows = list(batch.items())
        deadline = time.monotonic() + FLUSH_TIMEOUT_SECONDS
        for position, (row_key, sums) in enumerate(rows):
            if time.monotonic() > deadline:
                self._failed(dict(rows[position:]), TimeoutError())
                return False
            try:
                async with asyncio.timeout(FLUSH_TIMEOUT_SECONDS):
                    await self._write({row_key: sums})
            except (SQLAlchemyError, OSError, TimeoutError, *UNWRAPPED) as exc:
                reason = refused_value(exc)
                if reason is None:
                    self._failed(dict(rows[position:]), exc)
                    return False
                self.refused += sums[0]
                log.warning("usage ledger: a row the database refused was dropped (model %r, route %r): %s",
                            row_key[4], row_key[5], reason)
        return True

    def _failed(self, batch: dict[tuple, list], exc: BaseException) -> None:
        self.failed_flushes += 1
        self._merge_back(batch)
        log.warning("usage ledger: %d row(s) not written (%s); kept for the next flush",
                    len(batch), type(exc).__name__)

    async def _write(self, batch: dict[tuple, list]) -> None:
        rows = [dict(zip(ROW_KEY, key, strict=True)) | dict(zip(SUMS, sums, strict=True))
                for key, sums in batch.items()]
        async with self.engine.begin() as db:
            insert = (sqlite.insert(usage) if db.dialect.name == "sqlite" else postgresql.insert(usage))
            statement = insert.on_conflict_do_update(
                index_elements=list(ROW_KEY),
                set_={name: getattr(usage.c, name) + getattr(insert.excluded, name) for name in SUMS})
            await db.execute(statement, rows)

    def _merge_back(self, batch: dict[tuple, list]) -> None:
        for key, sums in batch.items():
            row = self._pending.get(key)
            if row is None:
                if len(self._pending) >= self.max_rows:
                    self.dropped += sums[0]
                    continue
                self._pending[key] = sums
            else:
                for index, value in enumerate(sums):
                    row[index] += value

    async def _run(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.flush_seconds):
                    await stopping.wait()
            await self.flush()  # at the interval, and once more when stopping: what is left

    def start(self) -> None:
        if self._task is None:
            self._stopping = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run(self._stopping), name="usage-ledger")

    async def stop(self) -> None:
        """Write what is left (bounded by FLUSH_TIMEOUT_SECONDS); a write under way is never cancelled half-way."""
        if self._task is not None:
            self._stopping.set()
            await self._task
            self._task = None
        else:
            await self.flush()

    def status(self) -> dict:
        return {"pending_rows": len(self._pending), "dropped_records": self.dropped, "refused_records": self.refused,
                "failed_flushes": self.failed_flushes}
