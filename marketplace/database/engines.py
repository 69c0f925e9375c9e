"""Database engines from a URL: SQLite through aiosqlite, PostgreSQL through asyncpg.

``create_engine(url)`` accepts the plain forms too (``sqlite:///file.db``,
``postgresql://...``) and picks the async driver. SQLite connections get WAL
journalling, enforced foreign keys, a busy timeout, and a ``geodesic_km`` SQL
function (Vincenty on WGS-84: ``marketplace.places.geodesy``) that the search orders
by; on PostgreSQL the migrations create a function of the same name and
formula, so one query text serves both.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from sqlalchemy.ext.asyncio import create_async_engine as _create_async_engine

from gateway.api import configure_sqlite_connection, sqlite_database
from marketplace.places.geodesy import vincenty_km

SQLITE_MMAP_BYTES = 1 << 30
SQLITE_CACHE_KIB = 64 * 1024
POSTGRES_CONNECT_TIMEOUT_SECONDS = 10
_DRIVERS = {"sqlite": "sqlite+aiosqlite", "postgresql": "postgresql+asyncpg", "postgres": "postgresql+asyncpg"}


def normalize_url(url: str) -> str:
    """``url`` with the async driver named (``sqlite`` -> ``sqlite+aiosqlite``, ...)."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend not in ("sqlite", "postgresql", "postgres"):
        raise ValueError(f"database_url: unsupported database {backend!r} (use sqlite or postgresql)")
    if "+" not in parsed.drivername:
        parsed = parsed.set(drivername=_DRIVERS[backend])
    return parsed.render_as_string(hide_password=False)


def database_kind(url: str) -> str:
    """``"sqlite"`` or ``"postgresql"``."""
    return "sqlite" if make_url(normalize_url(url)).get_backend_name() == "sqlite" else "postgresql"


def sqlite_path(url: str) -> Path | None:
    """The file behind a SQLite URL (None for PostgreSQL or in-memory SQLite)."""
    database = sqlite_database(normalize_url(url))
    return Path(database) if database is not None else None


async def ensure_database_directory(url: str) -> None:
    """Create the directory of a SQLite file if missing (``./data/`` on a first start)."""
    path = sqlite_path(url)
    if path is not None:
        await asyncio.to_thread(path.parent.mkdir, parents=True, exist_ok=True)


def _configure_sqlite(dbapi_connection, _record) -> None:
    # The busy timeout, WAL and synchronous=NORMAL as the gateway's own database sets them (often the same
    # file, migrated at the same start), then the catalogue's own settings.
    configure_sqlite_connection(dbapi_connection)
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute(f"PRAGMA mmap_size={SQLITE_MMAP_BYTES}")
    cursor.execute(f"PRAGMA cache_size=-{SQLITE_CACHE_KIB}")
    cursor.close()
    # Runs on aiosqlite's own thread when queries call it, not on the event loop.
    dbapi_connection.create_function("geodesic_km", 4, vincenty_km, deterministic=True)


def create_engine(url: str, **kwargs) -> AsyncEngine:
    """An async engine for ``url``, configured for its database."""
    url = normalize_url(url)
    # Bound values (emails, chat text, names) stay out of exception messages and so out of
    # error logs; the statement itself is still shown.
    kwargs.setdefault("hide_parameters", True)
    if database_kind(url) == "sqlite":
        engine = _create_async_engine(url, **kwargs)
        event.listen(engine.sync_engine, "connect", _configure_sqlite)
        return engine
    kwargs.setdefault("pool_pre_ping", True)
    # asyncpg waits 60 s for a connection by default: a host that swallows packets would hold
    # a request (or the start-up) that long before it could answer 503.
    kwargs["connect_args"] = {"timeout": POSTGRES_CONNECT_TIMEOUT_SECONDS, **kwargs.get("connect_args", {})}
    return _create_async_engine(url, **kwargs)


def create_sessionmaker(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    """Sessions whose objects stay readable after commit (routes serialise them afterwards)."""
    return async_sessionmaker(engine, expire_on_commit=False)
