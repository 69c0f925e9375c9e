"""Teams and keys as the store returns them (never a secret; a new secret travels beside, once)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from gateway.tenancy.model import KeyRole, Limits, Priority


@dataclass(frozen=True, slots=True)
class TeamRecord:
    id: str
    name: str
    limits: Limits
    priority: Priority
    weight: float
    created_at: dt.datetime
    updated_at: dt.datetime


@dataclass(frozen=True, slots=True)
class KeyRecord:
    id: str
    name: str
    role: KeyRole
    team_id: str | None
    models: tuple[str, ...] | None
    limits: Limits
    priority: Priority | None  # None: the team's band (else standard)
    weight: float | None       # None: the team's weight (else 1)
    prefix: str                # the secret's first characters, to tell keys apart
    expires_at: dt.datetime | None
    revoked_at: dt.datetime | None
    created_at: dt.datetime
    updated_at: dt.datetime
    previous_secret_expires_at: dt.datetime | None = None  # a rotated-out secret still valid until then


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a list, ordered by id; ``next_after``: the id to continue after, None at the end."""

    items: list
    next_after: str | None
