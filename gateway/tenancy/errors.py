"""Tenancy's own exceptions, without HTTP statuses: the admin API maps them in one place."""

from __future__ import annotations


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


class StoreUnavailable(TenancyError):
    """The gateway's database cannot be reached now (or its schema is not ready yet)."""


class LimiterUnavailable(TenancyError):
    """Redis is down and the limiter is set to refuse meanwhile (``LIMITS_WHEN_REDIS_DOWN=closed``)."""
