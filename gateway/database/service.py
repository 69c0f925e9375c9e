"""``GatewayDatabase``: the gateway's own database in one process: one engine, migrated once at start.

The app's lifespan starts it before the packages that keep data in it (tenancy: keys, teams,
the usage ledger; files, batches and webhooks) and stops it after them. Starting runs the one
Alembic history (in a thread: Alembic is synchronous) and waits for it at most
``FIRST_WAIT_SECONDS``: a database that is slow or down holds the gateway's start no longer.
The migrations are then retried in the background (after 1, 2, 5, then every 10 s), and each
package answers its own 503 meanwhile (database keys and ``/admin``: ``key_store_unavailable``;
files, batches, webhooks: ``jobs_store_unavailable``) while everything else serves. The
packages read ``ready`` or await ``wait_ready()`` before their own background work starts.

One engine for all of them: one pool per process (``DATABASE_POOL_SIZE``), so the connections
a replica may hold are known, and one migration run, so Alembic (which keeps its running
context in module globals) never runs two of the gateway's own at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging

from gateway.config import Settings
from gateway.database.engine import EngineLimits, create_engine, dispose, is_sqlite, normalize_url
from gateway.database.migrations import runner

log = logging.getLogger("gateway.database")

FIRST_WAIT_SECONDS = 30.0
RETRY_SECONDS = (1.0, 2.0, 5.0, 10.0)
MIGRATION_STOP_SECONDS = 60.0  # a stopping gateway waits this long for a migration under way


class GatewayDatabase:
    name = "database"  # its entry under /health's "features"

    def __init__(self, settings: Settings) -> None:
        self.url = normalize_url(settings.database_url)
        self.limits = EngineLimits.from_settings(settings)
        self.engine = create_engine(self.url, self.limits)  # connects when first used
        self.error: str | None = None  # the last failed attempt's exception type (never its text)
        self.opened = asyncio.Event()  # set once the schema is at the head revision
        self._first_attempt = asyncio.Event()  # the first migration attempt ended, well or not
        self._opening: asyncio.Task | None = None
        self._migration: asyncio.Future | None = None

    @property
    def ready(self) -> bool:
        """The schema is at the head revision: the tables may be used."""
        return self.opened.is_set()

    async def start(self, wait_seconds: float = FIRST_WAIT_SECONDS) -> None:
        """Migrate in the background; wait for the first attempt at most ``wait_seconds``."""
        if self._opening is None:
            self._opening = asyncio.create_task(self._open(), name="gateway-database-migrations")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._first_attempt.wait(), wait_seconds)
        if not self.ready:
            log.warning("the gateway's database is not ready (%s): database keys, the admin API, the usage ledger, "
                        "files, batches and webhooks answer 503 until it is; migrating again in the background",
                        self.error or f"still migrating after {wait_seconds:.0f}s")

    async def wait_ready(self, timeout: float | None = None) -> bool:
        """Whether the database became ready within ``timeout`` seconds (None: wait as long as it takes)."""
        try:
            await asyncio.wait_for(self.opened.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def _open(self) -> None:
        for attempt in itertools.count():
            try:
                # Shielded, and awaited by stop(): a migration left running in its thread would
                # collide with the next one in this process (Alembic's globals).
                self._migration = asyncio.ensure_future(
                    asyncio.to_thread(runner.upgrade, self.url, limits=self.limits))
                await asyncio.shield(self._migration)
            except Exception as exc:  # any failure: note it, try again
                if type(exc).__name__ != self.error and attempt > 0:
                    log.warning("the gateway's database is still not ready (%s); retrying", type(exc).__name__)
                self.error = type(exc).__name__
                self._first_attempt.set()
                await asyncio.sleep(RETRY_SECONDS[min(attempt, len(RETRY_SECONDS) - 1)])
                continue
            self.error = None
            self.opened.set()
            self._first_attempt.set()
            if attempt > 0:
                log.warning("the gateway's database is ready (migrated after %d failed attempts)", attempt)
            return

    async def stop(self) -> None:
        """After every package that uses the engine has stopped (the ledger writes its last sums)."""
        if self._opening is not None and not self._opening.done():
            self._opening.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._opening
        if self._migration is not None and not self._migration.done():
            await asyncio.wait({self._migration}, timeout=MIGRATION_STOP_SECONDS)
        await dispose(self.engine)  # (bounded: a database that hangs must not hold the shutdown)

    def status(self) -> dict:
        return {"ready": self.ready, "backend": "sqlite" if is_sqlite(self.url) else "postgresql",
                "error": self.error}
