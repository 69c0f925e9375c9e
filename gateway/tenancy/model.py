"""The shapes tenancy shares: limits, priority bands, roles, and what a key resolves to.

``Limits`` is the one home of what a limit may be (the admin API validates with it, the
store keeps it as JSON, the limiter reads it): every field optional, ``None`` meaning no
limit. A team's limits are shared by all its keys; a key's own limits apply within them; an
app key's ``end_user`` limits apply to each of its end users, so one end user cannot use up
the app's whole quota.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

KeyRole = Literal["read", "app", "admin"]
Priority = Literal["interactive", "standard", "batch"]
BudgetPeriod = Literal["day", "month", "total"]
PRIORITIES: tuple[str, ...] = ("interactive", "standard", "batch")
DEFAULT_PRIORITY: Priority = "standard"
DEFAULT_WEIGHT = 1.0
MAX_LIMIT = 10**12  # beyond any real limit, inside every counter's 64 bits


class ScopeLimits(BaseModel):
    """Limits of one scope (a team, a key, or each end user of an app key). ``None``: unlimited."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rpm: int | None = Field(None, ge=1, le=MAX_LIMIT, description="requests per minute (a sliding 60 s window)")
    tpm: int | None = Field(None, ge=1, le=MAX_LIMIT,
                            description="tokens per minute, prompt + completion (a sliding 60 s window)")
    max_concurrency: int | None = Field(None, ge=1, le=MAX_LIMIT, description="requests in flight at once")
    budget_tokens: int | None = Field(None, ge=1, le=MAX_LIMIT,
                                      description="tokens (prompt + completion) per budget_period")
    budget_period: BudgetPeriod | None = Field(None, description="day or month (UTC calendar), or total (never resets)")

    @model_validator(mode="after")
    def _budget_has_a_period(self) -> "ScopeLimits":
        if self.budget_tokens is not None and self.budget_period is None:
            raise ValueError("budget_period is required with budget_tokens (day, month or total)")
        return self

    @property
    def empty(self) -> bool:
        return self.rpm is None and self.tpm is None and self.max_concurrency is None and self.budget_tokens is None


class Limits(ScopeLimits):
    """A key's or a team's limits; ``end_user``: the limits of each end user of an app key."""

    end_user: ScopeLimits | None = None

    @property
    def empty(self) -> bool:
        return super().empty and (self.end_user is None or self.end_user.empty)


NO_LIMITS = Limits()


@dataclass(frozen=True, slots=True)
class TeamLimits:
    """What a resolved key carries of its team."""

    id: str
    limits: Limits


@dataclass(frozen=True, slots=True)
class ResolvedKey:
    """A database key as the request path sees it (never its secret or digest)."""

    id: str                      # the key's id: its key id in logs, metrics and owners of stored data
    name: str
    role: KeyRole
    team: TeamLimits | None
    models: tuple[str, ...] | None  # None: every model
    limits: Limits
    priority: Priority
    weight: float
    expires_at: dt.datetime | None  # the key's own expiry (UTC)
    secret_expires_at: dt.datetime | None  # this secret's (a rotated-out secret's grace end)

    def valid_at(self, now: dt.datetime) -> bool:
        return all(moment is None or now < moment for moment in (self.expires_at, self.secret_expires_at))


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def as_utc(moment: dt.datetime | None) -> dt.datetime | None:
    """``moment`` in UTC, a naive one taken as UTC (SQLite gives naive ones back; they were written in UTC).

    A ValueError when UTC has no such moment: 9999-12-31T23:59:59-14:00 is past datetime's last one,
    0001-01-01T00:00:00+14:00 before its first (a client's date, which pydantic lets through).
    """
    if moment is None:
        return None
    try:
        return moment.replace(tzinfo=dt.UTC) if moment.tzinfo is None else moment.astimezone(dt.UTC)
    except OverflowError:
        raise ValueError("is beyond the calendar's range in UTC") from None
