"""The limiter the request path calls: Redis when configured, in process otherwise or while Redis is down.

Four calls per request (see docs/keys.md, "The request path"):

- ``admit(demand)`` before the engine is asked: one check-and-reserve over every scope, or
  ``RateLimited`` (with what ``Retry-After`` and the rate-limit headers need), or
  ``LimiterUnavailable`` (Redis down under ``LIMITS_WHEN_REDIS_DOWN=closed``);
- ``consume(reservation, tokens)`` as a stream produces tokens: free while the reservation
  covers them; beyond it, one call extends it as far as the budgets allow; False means the
  budget is spent and the stream must be cut;
- ``settle(reservation, used)`` once at the end: the engine's usage replaces the
  reservation (a failed request settles what it consumed, usually 0) and its concurrency
  lease is released; ``ran=False`` (the request never reached an engine: refused by the
  gateway's queue, its client gone while it waited, no engine reachable) also gives back its
  request in the ``rpm`` window, as OpenAI and Anthropic count only the requests they accept.
  On Redis it is sent without awaiting the reply (pipelined behind whatever else is in
  flight): a request's end never waits on Redis for it.

A request holding a ``max_concurrency`` slot holds it as a lease (``LIMIT_LEASE_SECONDS``), so that
a replica that dies mid-request does not hold its slots for ever; the limiter renews the leases of
its requests still in flight every third of a lease (one command each, not awaited; a request's own
path pays a dict insert and a pop), so a request longer than a lease keeps its slot. It holds them
weakly: a reservation nothing refers to any more (its request gone without settling) is not
renewed, and its lease runs out as before.

A demand with no limit in any scope costs no I/O at all. Redis down: every call is bounded
by ``REDIS_TIMEOUT_SECONDS``; the first failure marks Redis down, and until a probe (every
``PROBE_SECONDS``) finds it back no request waits on it: under ``local`` (the default) each
replica enforces the limits alone (budgets continue from what Redis last said of them);
under ``closed`` requests of limited keys are refused. A reservation made in Redis and
settled while it is down loses its adjustment (its lease expires by itself); the count is in
``status()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from typing import Literal

from gateway.tenancy.errors import LimiterUnavailable
from gateway.tenancy.limits.calendar import period_label
from gateway.tenancy.limits.local import LocalLimits
from gateway.tenancy.limits.model import Demand, Reservation
from gateway.tenancy.limits.redis_limits import RedisLimits
from gateway.tenancy.limits.resp import RedisReplyError, RedisUnavailable

log = logging.getLogger("gateway.limits")

PROBE_SECONDS = 0.5
EXTEND_CHUNK = 128  # tokens asked at once when a stream outgrows its reservation
MAX_REMEMBERED_BUDGETS = 100_000
WhenDown = Literal["local", "closed"]


class Limiter:
    def __init__(self, *, local: LocalLimits, redis: RedisLimits | None = None, when_down: WhenDown = "local",
                 probe_seconds: float = PROBE_SECONDS) -> None:
        self.local = local
        self.redis = redis
        self.when_down = when_down
        self.probe_seconds = probe_seconds
        self.redis_down = False
        self.lost_settlements = 0
        # scope -> (the second of Redis's last reply for it, its budget's use then); its period's label is
        # worked out only when it is needed (Redis down), not on every request
        self._budgets: dict[str, tuple[int, int]] = {}
        self._probe: asyncio.Task | None = None
        # The reservations in flight that hold a concurrency lease, by id (weak references: a plain dict of
        # them costs the request path a fraction of a WeakValueDictionary's Python), and the task renewing them.
        self._leased: dict[str, weakref.ref[Reservation]] = {}
        self._renewing: asyncio.Task | None = None

    @property
    def backend(self) -> str:
        return "redis" if self.redis is not None else "local"

    async def admit(self, demand: Demand) -> Reservation:
        if not demand.limited:
            return Reservation("", demand, demand.tokens, 0, "none")
        if self.redis is not None and not self.redis_down:
            try:
                reservation, budgets = await self.redis.admit(demand)
            except (RedisUnavailable, RedisReplyError) as exc:
                self._went_down(exc)
            else:
                self._remember(demand, reservation.second, budgets)
                return self._leasing(reservation)
        if self.redis is not None and self.when_down == "closed":
            raise LimiterUnavailable("limits cannot be checked while Redis is unavailable")
        if self.redis is not None:
            self._seed(demand)
        return self._leasing(self.local.admit(demand))

    async def consume(self, reservation: Reservation, tokens: int) -> bool:
        """Count ``tokens`` more as used; False once the budgets cannot cover them (cut the stream)."""
        reservation.used += tokens
        if reservation.used <= reservation.granted or reservation.backend == "none":
            return True
        await self.extend(reservation, max(reservation.used - reservation.granted, EXTEND_CHUNK))
        return reservation.used <= reservation.granted

    async def extend(self, reservation: Reservation, tokens: int) -> int:
        """Up to ``tokens`` more for ``reservation`` (what the budgets still allow); the tokens granted."""
        if reservation.backend == "none":
            reservation.granted += tokens
            return tokens
        if reservation.backend == "local":
            return self.local.extend(reservation, tokens)
        if self.redis_down:
            return 0
        try:
            return await self.redis.extend(reservation, tokens)  # type: ignore[union-attr]
        except (RedisUnavailable, RedisReplyError) as exc:
            self._went_down(exc)
            return 0

    def settle(self, reservation: Reservation, used: int | None = None, *, ran: bool = True) -> None:
        """The request ended: ``used`` tokens (default: what ``consume`` counted) replace the reservation.

        ``ran`` False: it never reached an engine; its request leaves the ``rpm`` window too. Never
        waits (Redis's reply is not awaited), so it is no coroutine: the request path calls it once per
        request of a limited key.
        """
        if reservation.settled:
            return
        reservation.settled = True
        self._leased.pop(reservation.id, None)
        used = reservation.used if used is None else used
        if reservation.backend == "local":
            self.local.settle(reservation, used, ran=ran)
        elif reservation.backend == "redis":
            if self.redis_down:
                self.lost_settlements += 1
                return
            try:
                self.redis.settle(reservation, used, ran=ran)  # type: ignore[union-attr]  # sent; its reply is not awaited
            except RedisUnavailable as exc:
                self.lost_settlements += 1
                self._went_down(exc)

    def _leasing(self, reservation: Reservation) -> Reservation:
        """``reservation``, its lease renewed while it is in flight if it holds a concurrency slot."""
        if reservation.demand.leases:
            self._leased[reservation.id] = weakref.ref(reservation)
            if self._renewing is None:
                self._renewing = asyncio.get_running_loop().create_task(self._renew_leases(), name="lease-renewal")
        return reservation

    def renew_leases(self) -> int:
        """Renew the lease of every reservation in flight that holds one; how many were renewed."""
        renewed = 0
        for reservation_id, held in list(self._leased.items()):
            reservation = held()
            if reservation is None or reservation.settled:  # (its request dropped it without settling)
                self._leased.pop(reservation_id, None)
                continue
            if reservation.backend == "local":
                self.local.extend(reservation, 0)
            elif reservation.backend == "redis" and not self.redis_down:
                try:
                    self.redis.renew(reservation)  # type: ignore[union-attr]
                except RedisUnavailable as exc:
                    self._went_down(exc)
                    continue
            else:
                continue
            renewed += 1
        return renewed

    async def _renew_leases(self) -> None:
        every = min(self.local.lease_seconds, self.redis.lease_ms / 1000 if self.redis is not None else
                    self.local.lease_seconds) / 3
        while True:
            await asyncio.sleep(every)
            try:
                self.renew_leases()
            except Exception:  # (a renewal that fails leaves the lease to run out, as without renewal)
                log.exception("renewing the concurrency leases failed")

    def status(self) -> dict:
        """What /health shows of the limiter."""
        status: dict = {"ready": True, "backend": self.backend}
        if self.redis is not None:
            status |= {"redis": "down" if self.redis_down else "up", "when_redis_down": self.when_down,
                       "enforcing": ("refusing limited keys" if self.when_down == "closed" else "per replica")
                       if self.redis_down else "across replicas",
                       "lost_settlements": self.lost_settlements + self.redis.client.failed_unawaited}
        else:
            status["enforcing"] = "per replica"
        return status

    def _remember(self, demand: Demand, second: int, budgets: list[int]) -> None:
        for scope, used in zip(demand.scopes, budgets, strict=False):
            if used >= 0:
                if len(self._budgets) >= MAX_REMEMBERED_BUDGETS and scope.name not in self._budgets:
                    self._budgets.pop(next(iter(self._budgets)))
                self._budgets[scope.name] = (second, used)

    def _seed(self, demand: Demand) -> None:
        """The local limiter takes over each budget from what Redis last said of it, in the same period."""
        second = int(self.local.clock())
        for scope in demand.scopes:
            period = scope.limits.budget_period
            if scope.limits.budget_tokens is not None:
                last = self._budgets.get(scope.name)
                if last is not None:
                    label = period_label(period, second)
                    if period_label(period, last[0]) == label:
                        self.local.seed_budget(scope.name, label, last[1])

    def _went_down(self, exc: Exception) -> None:
        if self.redis_down:
            return
        self.redis_down = True
        log.warning("Redis is unavailable (%s): limits are %s until it answers again", exc,
                    "enforced per replica" if self.when_down == "local" else "refusing limited keys")
        if self._probe is None or self._probe.done():
            self._probe = asyncio.get_running_loop().create_task(self._probe_until_up(), name="redis-probe")

    async def _probe_until_up(self) -> None:
        while True:
            await asyncio.sleep(self.probe_seconds)
            try:
                await self.redis.client.call(b"PING")  # type: ignore[union-attr]
            except (RedisUnavailable, RedisReplyError):
                continue
            self.redis_down = False
            log.warning("Redis answers again: limits are enforced across replicas")
            return

    async def close(self) -> None:
        for task in (self._probe, self._renewing):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self.redis is not None:
            await self.redis.client.close()
