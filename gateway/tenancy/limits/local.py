"""The limiter in process: the same windows, leases and budgets as the Redis scripts, for one replica.

Used when ``REDIS_URL`` is unset (limits then hold per replica: two replicas let twice a
limit through, which the gateway warns about at start) and while Redis is down under
``LIMITS_WHEN_REDIS_DOWN=local``. Every call is synchronous and never awaits: on one event
loop a check and its reservation are atomic. Memory stays bounded: scopes idle for more than
a window (nothing in flight, no budget) are forgotten, and at most ``max_scopes`` are kept.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.tenancy.limits.calendar import period_end, period_label
from gateway.tenancy.limits.model import (
    REASONS,
    WINDOW_SECONDS,
    Demand,
    RateInfo,
    RateLimited,
    Reservation,
)


@dataclass(slots=True)
class _Counters:
    rpm: dict[int, int] = field(default_factory=dict)      # second -> requests
    tpm: dict[int, int] = field(default_factory=dict)      # second -> tokens
    leases: dict[str, float] = field(default_factory=dict)  # reservation id -> deadline
    budget: dict[str, int] = field(default_factory=dict)    # period label -> tokens
    touched: float = 0.0


def _window_sum(buckets: dict[int, int], oldest: int) -> int:
    for second in [second for second in buckets if second < oldest]:
        del buckets[second]
    return sum(buckets.values())


def _wait_for(buckets: dict[int, int], need: int, now: float) -> float:
    freed = 0
    for second in sorted(buckets):
        freed += buckets[second]
        if freed >= need:
            return second + WINDOW_SECONDS - now
    return float(WINDOW_SECONDS)


class _Tightest:
    def __init__(self) -> None:
        self.values: dict[str, tuple[int, int, float | None]] = {}

    def offer(self, kind: str, limit: int, remaining: int, reset: float | None) -> None:
        held = self.values.get(kind)
        if held is None or remaining < held[1]:
            self.values[kind] = (limit, remaining, reset)

    def info(self) -> RateInfo:
        fields = {}
        for kind, (limit, remaining, reset) in self.values.items():
            fields |= {f"{kind}_limit": limit, f"{kind}_remaining": max(remaining, 0), f"{kind}_reset": reset}
        return RateInfo(**fields)


class LocalLimits:
    def __init__(self, *, lease_seconds: float = 300.0, max_scopes: int = 100_000,
                 clock: Callable[[], float] = time.time) -> None:
        self.lease_seconds = lease_seconds
        self.max_scopes = max_scopes
        self.clock = clock
        self._scopes: dict[str, _Counters] = {}

    def seed_budget(self, scope: str, label: str, used: int) -> None:
        """Start a scope's budget from what Redis last said of it (the fallback continues from there)."""
        counters = self._counters(scope, self.clock())
        counters.budget[label] = max(counters.budget.get(label, 0), used)

    def admit(self, demand: Demand) -> Reservation:
        now = self.clock()
        second = int(now)
        oldest = second - WINDOW_SECONDS + 1
        granted = demand.tokens
        tight = _Tightest()
        checked = []
        for scope in demand.scopes:
            limits, counters = scope.limits, self._counters(scope.name, now)
            if limits.rpm is not None:
                used = _window_sum(counters.rpm, oldest)
                if used + 1 > limits.rpm:
                    tight.offer("requests", limits.rpm, 0, max(counters.rpm) + WINDOW_SECONDS - now)
                    raise RateLimited(REASONS[1], scope.name, _wait_for(counters.rpm, used + 1 - limits.rpm, now),
                                      tight.info())
            if limits.tpm is not None:
                used = _window_sum(counters.tpm, oldest)
                if demand.min_tokens > limits.tpm:
                    tight.offer("tokens", limits.tpm, limits.tpm - used, 0)
                    raise RateLimited(REASONS[5], scope.name, None, tight.info())
                need = min(demand.tokens, limits.tpm)
                if used + need > limits.tpm:
                    tight.offer("tokens", limits.tpm, limits.tpm - used, max(counters.tpm) + WINDOW_SECONDS - now)
                    raise RateLimited(REASONS[2], scope.name, _wait_for(counters.tpm, used + need - limits.tpm, now),
                                      tight.info())
                granted = min(granted, limits.tpm - used)
            if limits.max_concurrency is not None:
                for lease in [lease for lease, deadline in counters.leases.items() if deadline <= now]:
                    del counters.leases[lease]
                if len(counters.leases) + 1 > limits.max_concurrency:
                    raise RateLimited(REASONS[3], scope.name, 1.0, tight.info())
            if limits.budget_tokens is not None:
                label = period_label(limits.budget_period, second)
                left = limits.budget_tokens - counters.budget.get(label, 0)
                ends = period_end(limits.budget_period, second)
                if left < demand.min_tokens:
                    tight.offer("budget", limits.budget_tokens, left, None if ends is None else ends - now)
                    raise RateLimited(REASONS[4], scope.name, None if ends is None else ends - now, tight.info())
                granted = min(granted, left)
            checked.append((scope, counters))
        reservation_id = secrets.token_hex(8)
        for scope, counters in checked:
            limits = scope.limits
            if limits.rpm is not None:
                counters.rpm[second] = counters.rpm.get(second, 0) + 1
                tight.offer("requests", limits.rpm, limits.rpm - sum(counters.rpm.values()),
                            second + WINDOW_SECONDS - now)
            if limits.tpm is not None:
                counters.tpm[second] = counters.tpm.get(second, 0) + granted
                tight.offer("tokens", limits.tpm, limits.tpm - sum(counters.tpm.values()),
                            second + WINDOW_SECONDS - now)
            if limits.max_concurrency is not None:
                counters.leases[reservation_id] = now + self.lease_seconds
            if limits.budget_tokens is not None:
                label = period_label(limits.budget_period, second)
                counters.budget[label] = total = counters.budget.get(label, 0) + granted
                ends = period_end(limits.budget_period, second)
                tight.offer("budget", limits.budget_tokens, limits.budget_tokens - total,
                            None if ends is None else ends - now)
        return Reservation(reservation_id, demand, granted, second, "local", tight.info())

    def extend(self, reservation: Reservation, tokens: int) -> int:
        now = self.clock()
        for scope in reservation.demand.scopes:
            limits = scope.limits
            if limits.budget_tokens is not None:
                used = self._counters(scope.name, now).budget.get(period_label(limits.budget_period,
                                                                               reservation.second), 0)
                tokens = max(0, min(tokens, limits.budget_tokens - used))
        self._charge(reservation, tokens, now, renew=True)
        reservation.granted += tokens
        return tokens

    def settle(self, reservation: Reservation, used: int, *, ran: bool = True) -> None:
        now = self.clock()
        self._charge(reservation, used - reservation.granted, now, renew=False, request=0 if ran else -1)

    def _charge(self, reservation: Reservation, tokens: int, now: float, *, renew: bool, request: int = 0) -> None:
        in_window = reservation.second >= int(now) - WINDOW_SECONDS + 1
        for scope in reservation.demand.scopes:
            limits, counters = scope.limits, self._counters(scope.name, now)
            if request and limits.rpm is not None and in_window:
                counters.rpm[reservation.second] = max(0, counters.rpm.get(reservation.second, 0) + request)
            if tokens and limits.tpm is not None and in_window:
                counters.tpm[reservation.second] = max(0, counters.tpm.get(reservation.second, 0) + tokens)
            if tokens and limits.budget_tokens is not None:
                label = period_label(limits.budget_period, reservation.second)
                counters.budget[label] = max(0, counters.budget.get(label, 0) + tokens)
            if limits.max_concurrency is not None:
                if renew:
                    if reservation.id in counters.leases:
                        counters.leases[reservation.id] = now + self.lease_seconds
                else:
                    counters.leases.pop(reservation.id, None)

    def _counters(self, name: str, now: float) -> _Counters:
        counters = self._scopes.get(name)
        if counters is None:
            if len(self._scopes) >= self.max_scopes:
                self._forget_idle(now)
            counters = self._scopes[name] = _Counters()
        counters.touched = now
        return counters

    def _forget_idle(self, now: float) -> None:
        """Drop scopes untouched for a window that hold no lease (budgets of idle scopes go too: bounded memory)."""
        idle = [name for name, counters in self._scopes.items()
                if now - counters.touched > WINDOW_SECONDS and not counters.leases]
        for name in idle:
            del self._scopes[name]
        while len(self._scopes) >= self.max_scopes:  # still full: the least recently touched go
            del self._scopes[min(self._scopes, key=lambda name: self._scopes[name].touched)]
