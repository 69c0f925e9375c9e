"""Who a batch line runs as: the principal of the key that created its batch, with its limits as they are now.

A line is admitted like a live request of its key (``relay.metering``: the key's models list,
its rpm, tpm, concurrency and budgets, its team's), so it needs the key's principal, not just
its id (all a batch stores: ``jobs.owner``). A database key's is read from the key store by id
(the key, then its team), and kept ``CALLER_TTL_SECONDS``: a change of limits reaches the lines
of a running batch within that, at the cost of two small reads per key and period, never per
line. A configured key (``API_KEYS``) has no limits: its id is no database key's, and its lines
run with no limits, as its live requests do.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from gateway.failures import Unavailable
from gateway.http.auth import Principal
from gateway.tenancy.errors import NotFound, StoreUnavailable
from gateway.tenancy.model import DEFAULT_PRIORITY, DEFAULT_WEIGHT, TeamLimits
from gateway.tenancy.store import KeyStore

CALLER_TTL_SECONDS = 1.0  # as long as a key's cached answer lives on the request path (tenancy.resolver)


@dataclass(frozen=True, slots=True)
class Cached:
    principal: Principal
    until: float


class LineCallers:
    def __init__(self, keys: KeyStore | None, *, ttl: float = CALLER_TTL_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.keys = keys  # None: no database keys (every owner is a configured key)
        self.ttl = ttl
        self.clock = clock
        self._cache: dict[str, Cached] = {}

    async def principal(self, owner: str) -> Principal:
        """The principal ``owner``'s lines run as (``Unavailable`` when the key store cannot say now)."""
        now = self.clock()
        cached = self._cache.get(owner)
        if cached is not None and now < cached.until:
            return cached.principal
        try:
            principal = await self._read(owner)
        except StoreUnavailable as exc:
            if cached is not None:
                return cached.principal  # (as the request path keeps a known key while the store is down)
            raise Unavailable(f"{exc}; the batch line runs again shortly", code="key_store_unavailable",
                              retry_after=1) from None
        if len(self._cache) >= 10_000:
            self._cache.clear()
        self._cache[owner] = Cached(principal, now + self.ttl)
        return principal

    async def _read(self, owner: str) -> Principal:
        if self.keys is None:
            return Principal(key_id=owner, role="read")
        try:
            key = await self.keys.get_key(owner)
        except NotFound:
            return Principal(key_id=owner, role="read")  # a configured key: no limits
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
        return Principal(key_id=key.id, role=key.role, team=team, limits=key.limits, models=key.models,
                         priority=priority or DEFAULT_PRIORITY,
                         weight=weight if weight is not None else DEFAULT_WEIGHT)
