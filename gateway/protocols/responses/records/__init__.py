"""Where stored responses live: the gateway's database (as ``SESSION_STORE`` says), or memory."""

from __future__ import annotations

import logging

from gateway.config import Settings
from gateway.failures import Failure, Unavailable
from gateway.protocols.responses.records.base import ResponseRecords
from gateway.protocols.responses.records.memory import MemoryResponses
from gateway.sessions.store.bounded import Bounded

log = logging.getLogger("gateway.responses")
RETRY_AFTER_SECONDS = 2


def make_records(settings: Settings) -> ResponseRecords:
    """The response store for ``settings`` (not opened yet): the sessions' database, else memory.

    Every call of a database's is bounded in time (``SESSION_STORE_TIMEOUT_SECONDS``), and one
    that fails or takes longer raises ``Unavailable`` (a 503 with ``Retry-After``), never a 500.
    """
    url = settings.effective_sessions_database_url
    timeout = settings.session_store_timeout_seconds
    if settings.session_store == "sqlite":
        from gateway.protocols.responses.records.sqlite import SQLiteResponses

        return Bounded(SQLiteResponses(url), timeout, _unavailable)
    if settings.session_store == "postgres":
        from gateway.protocols.responses.records.postgres import PostgresResponses

        return Bounded(PostgresResponses(url, timeout=timeout), timeout, _unavailable)
    return MemoryResponses(max_records=settings.responses_memory_max)


def _unavailable(operation: str, error: Exception) -> Exception:
    if isinstance(error, Failure):
        return error
    log.warning("response store unavailable", extra={"operation": operation, "error": repr(error)[:200]})
    return Unavailable("the response store is unavailable", code="response_store_unavailable",
                       retry_after=RETRY_AFTER_SECONDS)
