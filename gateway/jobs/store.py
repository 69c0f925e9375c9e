"""The gateway's database as files, batches and webhooks use it: transactions that fail as a 503.

The database itself (engine, migrations, readiness) is ``gateway.database.GatewayDatabase``,
started once by the app. Until its migrations are done (a database that is slow or down at
start), and whenever a query fails, these routes answer 503 ``jobs_store_unavailable`` and
nothing else is affected. A statement that fails on a value the database cannot hold (a data
error: ``gateway.database.errors``) is the request's fault instead: a 400 ``invalid_value``, since
retrying it never helps. Every call is bounded by the engine's timeouts (connect, pool wait,
statement: ``gateway.database.engine``), so a database that stops answering fails a request
in bounded time instead of hanging it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection

from gateway.database.errors import refused_value
from gateway.database.service import GatewayDatabase
from gateway.http.errors import GatewayError

log = logging.getLogger("gateway.jobs")


class StoreUnavailable(GatewayError):
    def __init__(self, message: str = "the batch and file store is unavailable, try again shortly") -> None:
        super().__init__(503, message, code="jobs_store_unavailable")


class ValueRefused(GatewayError):
    """A value of the request that the database cannot hold: the statement fails on every retry."""

    def __init__(self, message: str) -> None:
        super().__init__(400, message, code="invalid_value")


class JobsDatabase:
    def __init__(self, database: GatewayDatabase) -> None:
        self.database = database
        self.opened = database.opened  # set once the tables may be used (workers wait on it)

    @property
    def ready(self) -> bool:
        return self.database.ready

    async def wait_ready(self, timeout: float | None = None) -> bool:
        return await self.database.wait_ready(timeout)

    @contextlib.asynccontextmanager
    async def begin(self) -> AsyncIterator[AsyncConnection]:
        """A transaction; 503 while the database is not migrated yet or when it fails, 400 for a value it
        cannot hold."""
        if not self.database.ready:
            raise StoreUnavailable()
        try:
            async with self.database.engine.begin() as connection:
                yield connection
        except Exception as exc:
            refusal = refused_value(exc)
            if refusal is not None:
                raise ValueRefused(refusal) from exc
            if isinstance(exc, SQLAlchemyError):
                log.warning("the gateway database failed a files, batches or webhooks call: %s", type(exc).__name__)
                raise StoreUnavailable() from exc
            if isinstance(exc, OSError):  # TimeoutError included: connecting took longer than DATABASE_TIMEOUT_SECONDS
                raise StoreUnavailable() from exc
            raise
