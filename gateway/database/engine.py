"""The engine of the gateway's own database (``DATABASE_URL``): SQLite through aiosqlite, PostgreSQL through asyncpg.

Every call is bounded in time, so a database that is slow or gone costs the features that use
it a 503 within seconds and never hangs a request or a worker:

- PostgreSQL: connecting gives up after ``DATABASE_TIMEOUT_SECONDS`` (asyncpg waits 60 s by
  default), waiting for a pooled connection too, and every statement after
  ``DATABASE_STATEMENT_TIMEOUT_SECONDS`` (asyncpg's command timeout; the migrations, in the
  background, get longer: ``migrations.runner``). A process keeps at most
  ``DATABASE_POOL_SIZE`` connections (no overflow), so replicas x workers x pool size is the
  whole demand on the server's ``max_connections``. Connections are pinged when taken from the
  pool, so one cut by a database restart is replaced instead of failing the next request.
- SQLite: WAL journalling (readers never wait for the writer), ``synchronous=NORMAL`` and a
  busy timeout: a writer waits for another process's transaction (another worker, a replica on
  the same file, a restarted gateway) at most ``SQLITE_BUSY_TIMEOUT_MS``.

Bound values (names, digests, request bodies) stay out of error messages (``hide_parameters``).
The marketplace has a factory of its own (a feature cannot import the core's internals, and it
adds SQL functions); the session store talks to its database directly (aiosqlite, asyncpg).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from gateway.config import Settings, sqlite_database

# A writer waits this long for another one's transaction: a batch of 50,000 lines is written in
# one transaction, which takes seconds on a slow disk.
SQLITE_BUSY_TIMEOUT_MS = 10_000
WAL_SWITCH_RETRY_SECONDS = 0.05
log = logging.getLogger("gateway.database")

CLOSE_SECONDS = 2.0  # closing an engine's connections at shutdown: past it, they are left to the process's exit
_T = TypeVar("_T")
_cleaning_up: set[asyncio.Future] = set()  # cancelled calls whose clean-up runs on (held: a task needs a reference)
_DRIVERS = {"sqlite": "sqlite+aiosqlite", "postgresql": "postgresql+asyncpg", "postgres": "postgresql+asyncpg"}


@dataclass(frozen=True)
class EngineLimits:
    """How many connections one process keeps, and how long any one call may take."""

    pool_size: int = 10
    timeout_seconds: float = 5.0  # connecting, or waiting for a pooled connection
    statement_timeout_seconds: float = 30.0

    @classmethod
    def from_settings(cls, settings: Settings) -> EngineLimits:
        return cls(pool_size=settings.database_pool_size, timeout_seconds=settings.database_timeout_seconds,
                   statement_timeout_seconds=settings.database_statement_timeout_seconds)


def normalize_url(url: str) -> str:
    """``url`` with the async driver named (``sqlite:///x.db`` -> ``sqlite+aiosqlite:///x.db``)."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend not in _DRIVERS:
        raise ValueError(f"DATABASE_URL: unsupported database {backend!r} (use sqlite or postgresql)")
    if "+" not in parsed.drivername:
        parsed = parsed.set(drivername=_DRIVERS[backend])
    return parsed.render_as_string(hide_password=False)


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL; None for PostgreSQL or an in-memory SQLite."""
    database = sqlite_database(normalize_url(url))
    return Path(database) if database is not None else None


def configure_sqlite_connection(connection) -> None:
    """A new SQLite connection (the DB-API one): its busy timeout first, then WAL and ``synchronous=NORMAL``.

    The busy timeout comes first so that the switch to WAL waits for other connections as long as
    any writer does (set after it, the switch had only the driver's 5 s). And the switch is tried
    again when it comes back "database is locked" at once: on a new file, connections of several
    processes (replicas, workers, the marketplace's migrations at the same start) switching it
    together can each hold the lock the other needs, and SQLite answers one of them busy without
    waiting (a deadlock it refuses to wait on); a moment later the file is in WAL and the switch is
    a no-op. A replica migrating beside two others failed its start so, once in a test run.
    """
    cursor = connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
        while True:
            try:
                cursor.execute("PRAGMA journal_mode=WAL")
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise
                time.sleep(WAL_SWITCH_RETRY_SECONDS)  # (aiosqlite's thread, not the event loop)
        cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()


def _configure_sqlite(connection, _record) -> None:
    configure_sqlite_connection(connection)


def create_engine(url: str, limits: EngineLimits = EngineLimits(), **kwargs) -> AsyncEngine:
    """An async engine for ``url`` within ``limits`` (it connects when first used, never here).

    ``kwargs`` go to SQLAlchemy (the migrations pass ``poolclass=NullPool``: one connection, closed after).
    """
    url = normalize_url(url)
    kwargs.setdefault("hide_parameters", True)
    pooled = "poolclass" not in kwargs
    if is_sqlite(url):
        if sqlite_file(url) is None:  # in memory: one connection for the whole engine (SQLAlchemy's StaticPool)
            pooled = False
    else:
        kwargs.setdefault("pool_pre_ping", True)
        kwargs["connect_args"] = {"timeout": limits.timeout_seconds,
                                  "command_timeout": limits.statement_timeout_seconds,
                                  **kwargs.get("connect_args", {})}
    if pooled:
        kwargs.setdefault("pool_size", limits.pool_size)
        kwargs.setdefault("max_overflow", 0)
        kwargs.setdefault("pool_timeout", limits.timeout_seconds)
    engine = create_async_engine(url, **kwargs)
    if is_sqlite(url):
        event.listen(engine.sync_engine, "connect", _configure_sqlite)
    return engine


async def detached(call: Coroutine[Any, Any, _T]) -> _T:
    """``call``'s result; cancelled (its caller's deadline), it leaves at once, ``call``'s clean-up left to run on.

    SQLAlchemy's asyncpg adapter closes a connection whose query was cancelled with a grace of
    its own (``close(timeout=2)``, then terminate), inside the cancelled call: a caller bounding
    a read with ``asyncio.timeout(1)`` against a PostgreSQL that hangs waited 3 s, not 1 s. Run
    through here, the call is cancelled as before, and its clean-up goes on in the background
    (bounded by the driver's grace) while the caller leaves at its deadline. For reads whose
    callers bound them; a write must not be left behind half-known.
    """
    task = asyncio.ensure_future(call)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        task.cancel()  # (a task already done ignores it)
        _cleaning_up.add(task)
        task.add_done_callback(_cleaned_up)  # (called at once for a task already done)
        raise


def _cleaned_up(task: asyncio.Future) -> None:
    _cleaning_up.discard(task)
    if not task.cancelled():
        task.exception()  # (retrieved: a failure of a call nobody waits for any more is no news)


async def dispose(engine: AsyncEngine, *, seconds: float = CLOSE_SECONDS) -> None:
    """``engine.dispose()`` within ``seconds``; past them the connections are left behind (to the process's exit).

    Closing an asyncpg connection waits for the server to acknowledge it, without a bound of its
    own: against a PostgreSQL that hangs (a partition, a frozen host) a gateway stopped with
    SIGTERM never finished its shutdown.
    """
    task = asyncio.ensure_future(engine.dispose())
    await asyncio.wait({task}, timeout=seconds)
    if task.done():
        task.result()
        return
    task.cancel()
    _cleaning_up.add(task)
    task.add_done_callback(_cleaned_up)
    log.warning("the database did not answer within %g s: its connections are left to the process's exit", seconds)


async def close_pool(pool: Any, *, seconds: float = CLOSE_SECONDS) -> None:
    """An asyncpg pool (the session store's, the stored responses') closed within ``seconds``, else cut."""
    try:
        await asyncio.wait_for(pool.close(), seconds)
    except Exception:  # (a timeout: the database hangs; or a connection that failed as it closed)
        pool.terminate()
