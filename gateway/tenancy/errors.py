"""Tenancy's own exceptions, without HTTP statuses: the admin API maps them in one place."""

from __future__ import annotations

from sqlalchemy.exc import SQLAlchemyError

from gateway.database.errors import refused_value


class TenancyError(Exception):
    """Base of what this package raises on purpose."""


class NotFound(TenancyError):
    def __init__(self, kind: str, ident: str) -> None:
        super().__init__(f"no {kind} with id {ident!r}")
        self.kind = kind
        self.ident = ident


class Conflict(TenancyError):
    """The change contradicts what is stored (a team that still has keys, a revoked key rotated)."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class ValueRefused(TenancyError):
    """The database cannot hold a value of the request (``gateway.database.errors``): retrying never helps."""


class StoreUnavailable(TenancyError):
    """The gateway's database cannot be reached now (or its schema is not ready yet)."""


class LimiterUnavailable(TenancyError):
    """Redis is down and the limiter is set to refuse meanwhile (``LIMITS_WHEN_REDIS_DOWN=closed``)."""


def from_database(exc: Exception) -> TenancyError | None:
    """What a failed statement means here: a value the database cannot hold, or the database unavailable;
    None for anything else (a bug, or one of this package's own exceptions: let it through)."""
    refusal = refused_value(exc)
    if refusal is not None:
        return ValueRefused(refusal)
    if isinstance(exc, (SQLAlchemyError, OSError)):
        return StoreUnavailable(f"the gateway's database is unavailable ({type(exc).__name__})")
    return None
