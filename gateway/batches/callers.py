"""Who a batch line runs as: the principal of the key that created its batch, with its limits as they are now.

A line is admitted like a live request of its key (``relay.metering``: the key's models list,
its rpm, tpm, concurrency and budgets, its team's), so it needs the key's principal, not just
its id (all a batch stores: ``jobs.owner``). A database key's is read from the key store by id
(the key, then its team), and kept ``CALLER_TTL_SECONDS``: a change of limits reaches the lines
of a running batch within that, at the cost of two small reads per key and period, never per
line. A configured key (``API_KEYS``) has no limits: its id is no database key's, and its lines
run with no limits, as its live requests do.

A key revoked or past its ``expires_at`` raises ``OwnerKeyRefused`` (401, ``invalid_api_key``,
as its live requests get): its batches stop (``worker``). Revocation is seen within the same
``CALLER_TTL_SECONDS``; expiry at once (the cached expiry is checked against the clock).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass

from gateway.failures import Unavailable
from gateway.http.auth import Principal
from gateway.http.errors import GatewayError
from gateway.tenancy.errors import NotFound, StoreUnavailable
from gateway.tenancy.model import DEFAULT_PRIORITY, DEFAULT_WEIGHT, TeamLimits, utcnow
from gateway.tenancy.store import KeyStore

CALLER_TTL_SECONDS = 1.0  # as long as a key's cached answer lives on the request path (tenancy.resolver)


class OwnerKeyRefused(GatewayError):
    """The batch's key was revoked or has expired: its lines are refused as its live requests are."""

    def __init__(self, key_id: str, why: str) -> None:
        super().__init__(401, f"the API key {key_id} that created this batch {why}: its requests are no longer run",
                         code="invalid_api_key")


@dataclass(frozen=True, slots=True)
class Owner:
    """What the key store says of a batch's key: its principal, or why it no longer runs anything."""

    principal: Principal
    expires_at: dt.datetime | None = None
    revoked: bool = False

    def check(self, now: dt.datetime) -> Principal:
        if self.revoked:
            raise OwnerKeyRefused(self.principal.key_id, "was revoked")
        if self.expires_at is not None and now >= self.expires_at:
            raise OwnerKeyRefused(self.principal.key_id, "has expired")
        return self.principal


@dataclass(frozen=True, slots=True)
class Cached:
    owner: Owner
    until: float


class LineCallers:
    def __init__(self, keys: KeyStore | None, *, ttl: float = CALLER_TTL_SECONDS,
                 clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], dt.datetime] = utcnow) -> None:
        self.keys = keys  # None: no database keys (every owner is a configured key)
        self.ttl = ttl
        self.clock = clock
        self.wall_clock = wall_clock  # (a key's expiry is a UTC time)
        self._cache: dict[str, Cached] = {}

    async def principal(self, owner: str) -> Principal:
        """The principal ``owner``'s lines run as (``Unavailable`` when the key store cannot say now;
        ``OwnerKeyRefused`` when the key was revoked or has expired)."""
        now = self.clock()
        cached = self._cache.get(owner)
        if cached is not None and now < cached.until:
            return cached.owner.check(self.wall_clock())
        try:
            found = await self._read(owner)
        except StoreUnavailable as exc:
            if cached is not None:
                # (as the request path keeps a known key while the store is down)
                return cached.owner.check(self.wall_clock())
            raise Unavailable(f"{exc}; the batch line runs again shortly", code="key_store_unavailable",
                              retry_after=1) from None
        if len(self._cache) >= 10_000:
            self._cache.clear()
        self._cache[owner] = Cached(found, now + self.ttl)
        return found.check(self.wall_clock())

    async def _read(self, owner: str) -> Owner:
        if self.keys is None:
            return Owner(Principal(key_id=owner, role="read"))
        try:
            key = await self.keys.get_key(owner)  # (revoked keys too: the id's lookup does not filter them)
        except NotFound:
            return Owner(Principal(key_id=owner, role="read"))  # a configured key: no limits
        team = None
        priority, weight = key.priority, key.weight
        if key.team_id is not None:
            try:
                record = await self.keys.get_team(key.team_id)
            except NotFound:
                record = None
            if record is not None:
                team = TeamLimits(record.id, record.limits)
                priority = priority or record.priority
                weight = weight if weight is not None else record.weight
        principal = Principal(key_id=key.id, role=key.role, team=team, limits=key.limits, models=key.models,
                              priority=priority or DEFAULT_PRIORITY,
                              weight=weight if weight is not None else DEFAULT_WEIGHT)
        return Owner(principal, expires_at=key.expires_at, revoked=key.revoked_at is not None)
