"""The waiting requests of one model: a band queue per band, tenants within a band, keys within a tenant.

Each model has its own queue (``ModelQueue``): its engines are its capacity.

A band keeps its waiting requests per tenant and, within a tenant, per key, each in arrival
order. The next request of a band is the oldest waiting request of the tenant with the lowest
virtual token counter (``fairness``), among the keys and tenants that are not at their own
concurrency limit: a key at its limit does not hold up the other keys of its team, and a
tenant at its limit does not hold up the band (no head-of-line blocking).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from gateway.flow.bands import Band, Bands
from gateway.flow.demand import Demand, Grant
from gateway.flow.errors import QueueRefused
from gateway.flow.fairness import VirtualTokenCounter
from gateway.flow.observe import BandMetrics

QUEUED, GRANTED, REFUSED, CANCELLED = "queued", "granted", "refused", "cancelled"
_WAIT_SMOOTHING = 0.2


class Waiter:
    """One queued request; ``outcome`` is its ``Grant`` or ``QueueRefused`` once it left the queue."""

    __slots__ = ("demand", "seq", "enqueued_at", "deadline", "state", "outcome", "future")

    def __init__(self, demand: Demand, seq: int, now: float, deadline: float) -> None:
        self.demand = demand
        self.seq = seq
        self.enqueued_at = now
        self.deadline = deadline
        self.state = QUEUED
        self.outcome: Grant | QueueRefused | None = None
        self.future: asyncio.Future | None = None  # set by FlowControl for a request that awaits it

    def settle(self, state: str, outcome: Grant | QueueRefused | None) -> None:
        self.state, self.outcome = state, outcome
        future = self.future
        if future is None or future.done():
            return
        if isinstance(outcome, QueueRefused):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)

    def __repr__(self) -> str:
        return f"Waiter(#{self.seq}, {self.demand.band.name}, {self.demand.tenant}, {self.state})"


class TenantQueue:
    __slots__ = ("tenant", "keys", "size")

    def __init__(self, tenant: str) -> None:
        self.tenant = tenant
        self.keys: dict[str, deque[Waiter]] = {}
        self.size = 0


Blocked = Callable[[Demand], bool]


class BandQueue:
    """The waiting requests of one band of one model."""

    __slots__ = ("band", "tenants", "size", "since", "fairness")

    def __init__(self, band: Band) -> None:
        self.band = band
        self.tenants: dict[str, TenantQueue] = {}
        self.size = 0
        # When this band was last served, or became backlogged (for aging; see scheduler).
        self.since = 0.0
        self.fairness = VirtualTokenCounter()

    def push(self, waiter: Waiter, now: float) -> None:
        demand = waiter.demand
        tenant = self.tenants.get(demand.tenant)
        if tenant is None:
            tenant = self.tenants[demand.tenant] = TenantQueue(demand.tenant)
        line = tenant.keys.get(demand.key_id)
        if line is None:
            line = tenant.keys[demand.key_id] = deque()
        line.append(waiter)
        tenant.size += 1
        if self.size == 0:
            self.since = now
        self.size += 1
        self.fairness.join(demand.tenant, backlogged=tenant.size == 1)

    def remove(self, waiter: Waiter) -> None:
        """Take ``waiter`` out of line (it is the head of its key's line when it is dispatched)."""
        demand = waiter.demand
        tenant = self.tenants[demand.tenant]
        line = tenant.keys[demand.key_id]
        if line[0] is waiter:
            line.popleft()
        else:
            line.remove(waiter)
        if not line:
            del tenant.keys[demand.key_id]
        tenant.size -= 1
        if not tenant.size:
            del self.tenants[demand.tenant]
        self.size -= 1

    def next(self, key_blocked: Blocked, team_blocked: Blocked) -> Waiter | None:
        """The request this band serves next, skipping keys and teams at their limit (None: all are)."""
        best: Waiter | None = None
        best_counter = 0.0
        counter = self.fairness.counter
        for tenant in self.tenants.values():
            head: Waiter | None = None
            for line in tenant.keys.values():
                first = line[0]
                if (head is None or first.seq < head.seq) and not key_blocked(first.demand):
                    head = first
            if head is None or team_blocked(head.demand):
                continue
            value = counter(tenant.tenant)
            if best is None or value < best_counter or (value == best_counter and head.seq < best.seq):
                best, best_counter = head, value
        return best

    def largest(self) -> TenantQueue | None:
        """The tenant with the most requests waiting in this band."""
        return max(self.tenants.values(), key=lambda tenant: tenant.size, default=None)

    def newest(self, tenant: TenantQueue | None = None) -> Waiter | None:
        """The most recently queued request of this band, or of ``tenant`` in it."""
        newest: Waiter | None = None
        for each in (tenant,) if tenant is not None else self.tenants.values():
            for line in each.keys.values():
                if newest is None or line[-1].seq > newest.seq:
                    newest = line[-1]
        return newest


class ModelQueue:
    """One model's band queues (highest band first), their metrics, and how long its requests wait."""

    __slots__ = ("model", "bands", "size", "metrics", "typical_wait")

    def __init__(self, model: str, bands: Bands, metrics) -> None:
        self.model = model
        self.bands = [BandQueue(band) for band in bands.all]
        self.metrics = [BandMetrics(metrics, model, band.name) for band in bands.all]
        self.size = 0
        self.typical_wait = 0.0  # smoothed wait of dispatched requests: the fleet's Retry-After

    def waited(self, seconds: float) -> None:
        self.typical_wait += _WAIT_SMOOTHING * (seconds - self.typical_wait)
