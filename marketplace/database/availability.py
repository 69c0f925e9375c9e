"""Whether the marketplace's database can serve now, and what happens while it cannot.

A database that is down costs the marketplace only: the gateway starts and serves ``/v1``
without it, the marketplace's database routes answer 503 with ``Retry-After`` (never a 500),
and the feature comes up by itself once the database answers again, without a restart.

- ``is_outage(exc)``: the errors that mean "the database cannot serve now" (refused, lost or
  timed-out connections, an unreachable host, SQLite's unopenable, locked or full file), as
  opposed to a bug in a query, which stays a 500.
- :class:`Availability`: the feature's database state. ``start()`` makes the first attempt
  to bring the database up (migrations, demo data, cursor key), waiting for it at most
  ``MARKETPLACE_DB_START_WAIT_SECONDS``; whatever is not done by then goes on in a background
  task that retries with exponential backoff (``MARKETPLACE_DB_RETRY_SECONDS`` doubling up to
  ``MARKETPLACE_DB_RETRY_MAX_SECONDS``, with jitter so several workers do not retry in step).
  A request that meets an outage later reports it (``failed``): the feature reads not ready
  and the same task probes the database (``SELECT 1``) until it answers. Requests are not
  short-circuited meanwhile: once the database is back the next request succeeds, whatever
  the probe's timing.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import random
import socket
import sqlite3
from collections.abc import Awaitable, Callable

from sqlalchemy import exc as sa_exc

from marketplace.errors import DatabaseUnavailable

log = logging.getLogger("marketplace.database")

_DRIVER_MODULES = ("sqlalchemy", "asyncpg", "aiosqlite", "sqlite3")
# SQLite reports bugs in a statement as OperationalError too: those are not outages.
_SQLITE_BUGS = ("no such ", "syntax error", "has no column", "wrong number of arguments")


def is_outage(exc: BaseException) -> bool:
    """True when ``exc`` means the database cannot serve now (so 503), not a bug (500)."""
    if isinstance(exc, sa_exc.DBAPIError):
        if exc.connection_invalidated:
            return True
        if isinstance(exc.orig, sqlite3.OperationalError):
            return not any(bug in str(exc.orig) for bug in _SQLITE_BUGS)
        return isinstance(exc, (sa_exc.OperationalError, sa_exc.InterfaceError))
    if isinstance(exc, (sa_exc.TimeoutError, sa_exc.DisconnectionError)):  # pool checkout, connection checks
        return True
    # The drivers let socket errors through as they are (asyncpg's refused connect, a host that
    # does not resolve, a connect timeout): count them only when a driver raised them.
    return isinstance(exc, (OSError, TimeoutError)) and _raised_by_driver(exc)


def _raised_by_driver(exc: BaseException) -> bool:
    traceback = exc.__traceback__
    while traceback is not None:
        module = traceback.tb_frame.f_globals.get("__name__", "")
        if module.split(".", 1)[0] in _DRIVER_MODULES:
            return True
        traceback = traceback.tb_next
    return False


def outage_kind(exc: BaseException) -> str:
    """A short name for what failed (for status and messages; never the error's text, which may name hosts)."""
    cause = exc.orig if isinstance(exc, sa_exc.DBAPIError) and exc.orig is not None else exc
    if isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated:
        return "connection lost"
    if isinstance(cause, ConnectionRefusedError):
        return "connection refused"
    if isinstance(cause, socket.gaierror):
        return "host not found"
    if isinstance(cause, (TimeoutError, sa_exc.TimeoutError)):
        return "timeout"
    if isinstance(cause, OSError) and cause.errno:  # the system's words, without the path or address
        return os.strerror(cause.errno).lower()
    if isinstance(cause, sqlite3.Error):
        text = str(cause)
        for words, kind in (("unable to open", "cannot open the file"), ("locked", "database locked"),
                            ("full", "disk full"), ("disk I/O", "disk I/O error"), ("readonly", "read-only")):
            if words in text:
                return kind
    return type(cause).__name__


class Availability:
    """The database half of the marketplace's readiness: up, starting, or down with a retry on the way."""

    def __init__(self, *, bring_up: Callable[[], Awaitable[None]], probe: Callable[[], Awaitable[None]],
                 retry_seconds: float, retry_max_seconds: float) -> None:
        self._bring_up = bring_up  # until it succeeds once: migrations, demo data, cursor key
        self._probe = probe        # afterwards: does the database answer?
        self._first_delay = retry_seconds
        self._max_delay = max(retry_seconds, retry_max_seconds)
        self._delay = retry_seconds
        self.started = False
        self.problem: str | None = "starting"  # None when the database serves
        self.failures = 0                       # failed attempts since it last served
        self._next_attempt: float | None = None
        self._task: asyncio.Task | None = None

    @property
    def ready(self) -> bool:
        return self.started and self.problem is None

    async def start(self, *, wait_seconds: float) -> None:
        """The first attempt, waited for at most ``wait_seconds``; then the background task takes over."""
        first = asyncio.create_task(self._attempt(), name="marketplace-database-start")
        try:
            done = await asyncio.wait_for(asyncio.shield(first), wait_seconds)
        except TimeoutError:
            log.warning("the marketplace's database is not up yet: the gateway serves without it meanwhile",
                        extra={"waited_seconds": wait_seconds})
            self._task = asyncio.create_task(self._recover(pending=first), name="marketplace-database-recovery")
            return
        if not done:
            self._task = asyncio.create_task(self._recover(), name="marketplace-database-recovery")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def failed(self, exc: BaseException) -> None:
        """A request met an outage: read not ready and probe until the database answers."""
        if self.problem is None:
            self.problem = outage_kind(exc)
            log.warning("the marketplace's database stopped answering", extra={"problem": self.problem})
        if self._task is None or self._task.done():
            self._delay = self._first_delay
            self._task = asyncio.create_task(self._recover(), name="marketplace-database-recovery")

    def retry_after(self) -> int:
        """Whole seconds until the next attempt (1 when none is scheduled)."""
        if self._next_attempt is None:
            return 1
        left = self._next_attempt - asyncio.get_running_loop().time()
        return max(1, min(math.ceil(left), math.ceil(self._max_delay)))

    def unavailable(self) -> DatabaseUnavailable:
        """The 503 a request gets while the database cannot serve it."""
        return DatabaseUnavailable(problem=self.problem or "unavailable", starting=not self.started,
                                   retry_after=self.retry_after())

    def status(self) -> dict:
        if self.ready:
            return {"database": "up"}
        return {"database": "down" if self.started or self.failures else "starting",
                "problem": self.problem, "failed_attempts": self.failures, "retry_in_seconds": self.retry_after()}

    async def _attempt(self) -> bool:
        try:
            if self.started:
                await self._probe()
            else:
                await self._bring_up()
                self.started = True
        except Exception as exc:  # any failure leaves the feature down, never the gateway
            self.failures += 1
            kind = outage_kind(exc)
            if self.failures == 1 or kind != self.problem:
                # A bug (not an outage) gets its traceback; an outage one line per change.
                log.warning("the marketplace's database cannot serve: retrying in the background",
                            extra={"problem": kind, "attempt": self.failures}, exc_info=not is_outage(exc))
            self.problem = kind
            return False
        if self.failures:
            log.info("the marketplace's database serves again", extra={"failed_attempts": self.failures})
        self.problem, self.failures, self._delay, self._next_attempt = None, 0, self._first_delay, None
        return True

    async def _recover(self, pending: asyncio.Task | None = None) -> None:
        loop = asyncio.get_running_loop()
        if pending is not None and await pending:
            return
        while True:
            delay = self._delay * random.uniform(0.75, 1.25)
            self._delay = min(self._delay * 2, self._max_delay)
            self._next_attempt = loop.time() + delay
            await asyncio.sleep(delay)
            if await self._attempt():
                return
