"""Session stores: where generations are persisted (none for SESSION_STORE=memory)."""

from __future__ import annotations

import secrets

from gateway.config import Settings
from gateway.sessions.store.base import SessionStore
from gateway.sessions.store.bounded import Bounded

# How often a follower on another process looks for new events without a push
# (SQLite has no notifications; on PostgreSQL it only covers a missed NOTIFY).
POSTGRES_POLL_SECONDS = 1.0


def make_store(settings: Settings, *, replica: str | None = None) -> SessionStore | None:
    """The store ``SESSION_STORE`` asks for (not opened yet), every call bounded in time
    (``SESSION_STORE_TIMEOUT_SECONDS``, ``store.bounded``); None for memory-only sessions."""
    replica = replica or secrets.token_hex(8)
    url = settings.effective_sessions_database_url
    timeout = settings.session_store_timeout_seconds
    if settings.session_store == "sqlite":
        from gateway.sessions.store.sqlite import SQLiteStore

        store = SQLiteStore(url, replica=replica, lease_seconds=settings.session_lease_seconds,
                            poll_interval=settings.session_flush_interval, busy_timeout_seconds=timeout * 0.8)
    elif settings.session_store == "postgres":
        from gateway.sessions.store.postgres import PostgresStore

        store = PostgresStore(url, replica=replica, lease_seconds=settings.session_lease_seconds,
                              poll_interval=POSTGRES_POLL_SECONDS, timeout=timeout)
    else:
        return None
    return Bounded(store, timeout)
