"""Fair sharing within a band: a virtual token counter per tenant (VTC, Sheng et al., OSDI '24).

A tenant is a team, or a key without a team. Each tenant's counter is the tokens it was
served divided by its weight; when capacity frees, the band serves the backlogged tenant with
the lowest counter. A tenant sending ten times the load therefore gets no more tokens than
another of the same weight while both wait: its surplus stays queued (and times out or is
refused), it does not take the other's share. Weights scale the share: weight 2 gets twice
the tokens of weight 1.

Tokens are charged twice: the request's estimate when it is dispatched (its prompt plus the
completion it may ask for; nothing better is known before the engine answers), then the
difference to what was really served when it is released. The estimate keeps a tenant with
long generations in flight from being picked again and again before any of them finished.

A tenant that was idle does not bank credit: when it becomes backlogged its counter is lifted
to the band's virtual time, the counter of the tenant served last (start-time fair queueing;
VTC's "counter lift"). A tenant's state is dropped once it has nothing queued or in flight in
the band, so the table holds only active tenants.

Why VTC and not llm-d's round-robin between flows: round-robin is fair in requests, and an
LLM request's cost varies a hundredfold with its prompt and completion; counting tokens
served is what "a fair share of the fleet" means to a tenant. (Weighted fair queueing needs
each request's cost up front; VTC needs only an estimate and corrects it.)
"""

from __future__ import annotations


class VirtualTokenCounter:
    __slots__ = ("virtual_time", "_counters", "_active")

    def __init__(self) -> None:
        self.virtual_time = 0.0
        self._counters: dict[str, float] = {}
        self._active: dict[str, int] = {}  # tenant -> requests queued or in flight in this band

    def __len__(self) -> int:
        return len(self._active)

    def counter(self, tenant: str) -> float:
        return self._counters.get(tenant, self.virtual_time)

    def join(self, tenant: str, *, backlogged: bool) -> None:
        """One more request of ``tenant`` is queued or in flight; ``backlogged``: it starts a backlog.

        A tenant that starts a backlog is lifted to the virtual time (no credit for idling).
        """
        active = self._active.get(tenant)
        if active is None:
            self._active[tenant] = 1
            self._counters[tenant] = self.virtual_time
            return
        self._active[tenant] = active + 1
        if backlogged and self._counters[tenant] < self.virtual_time:
            self._counters[tenant] = self.virtual_time

    def leave(self, tenant: str) -> None:
        """One request of ``tenant`` left (served and released, cancelled or refused)."""
        active = self._active.get(tenant)
        if active is None:
            return
        if active > 1:
            self._active[tenant] = active - 1
        else:
            del self._active[tenant]
            del self._counters[tenant]

    def served(self, tenant: str, tokens: float, weight: float) -> None:
        """``tenant`` was picked to be served ``tokens`` (an estimate); the virtual time follows."""
        counter = self._counters.get(tenant)
        if counter is None:
            return
        if counter > self.virtual_time:
            self.virtual_time = counter
        self._counters[tenant] = counter + tokens / weight

    def correct(self, tenant: str, tokens: float, weight: float) -> None:
        """Add ``tokens`` (negative: the estimate was too high) to what ``tenant`` was charged."""
        counter = self._counters.get(tenant)
        if counter is not None:
            self._counters[tenant] = counter + tokens / weight
