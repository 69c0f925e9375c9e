"""What a limiter is asked (a ``Demand``), what it grants (a ``Reservation``), how it refuses (``RateLimited``).

A demand names the scopes it counts against, most general first: the key's team, the key,
and the end user (an app key's user, limited by the key's ``end_user`` limits). One
check-and-reserve covers all of them at once: either every scope admits the request and each
counts it, or none does.

Tokens: ``tokens`` is what the request may use at most (the prompt, counted or bounded from
its length, plus ``max_tokens``); ``min_tokens`` the least worth starting (the prompt plus
one). ``tpm`` must fit the whole demand (capped at the limit itself, so a request larger
than a minute's tokens can still run alone); a budget may grant less than asked, down to
``min_tokens``: the reservation's ``granted`` is then what the request may use, and the
request path lowers ``max_tokens`` or cuts the stream there.

Windows: ``rpm`` and ``tpm`` count in one-second buckets over the current second and the 60
before it, so whatever was counted within any 60 s is within the limit (a request leaves the
window between 60 and 61 s after it was counted). Budgets count per UTC calendar day or
month, or in total.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from gateway.tenancy.model import ScopeLimits

WINDOW_SECONDS = 61
PERIOD_CODES = {None: 0, "day": 1, "month": 2, "total": 3}
REASONS = {1: "rpm", 2: "tpm", 3: "max_concurrency", 4: "budget", 5: "tpm_too_large"}


@dataclass(frozen=True, slots=True)
class Scope:
    name: str            # "team:<id>", "key:<id>" or "user:<key id>:<end user>"
    limits: ScopeLimits


class Demand:
    """One request's demand. Its scopes and tag are a key's (``demand.demand_for`` builds them once per
    key, so the Redis limiter finds their packed form by identity); ``limited`` is said once with them."""

    __slots__ = ("scopes", "tag", "tokens", "min_tokens", "limited", "leases")

    def __init__(self, scopes: tuple[Scope, ...], tag: str, tokens: int, min_tokens: int,
                 limited: bool | None = None, leases: bool | None = None) -> None:
        self.scopes = scopes
        self.tag = tag            # every scope's counters live under this Redis hash tag (one slot in a cluster)
        self.tokens = tokens      # at most: prompt + max_tokens
        self.min_tokens = min_tokens  # at least: the prompt + 1
        self.limited = any(not scope.limits.empty for scope in scopes) if limited is None else limited
        # whether an admitted request holds a concurrency lease in some scope (renewed while it is in flight)
        self.leases = any(scope.limits.max_concurrency is not None for scope in scopes) if leases is None else leases

    def __repr__(self) -> str:
        return f"Demand(scopes={self.scopes!r}, tag={self.tag!r}, tokens={self.tokens}, min_tokens={self.min_tokens})"


class RateInfo(NamedTuple):
    """The tightest figures over the demand's scopes, for ``x-ratelimit-*`` / ``anthropic-ratelimit-*``.

    ``None``: no scope has a limit of that kind. Resets are seconds from now. A named tuple: one
    is built per request of a limited key, 3-4 times faster than a frozen dataclass (timeit).
    """

    requests_limit: int | None = None
    requests_remaining: int | None = None
    requests_reset: float | None = None
    tokens_limit: int | None = None
    tokens_remaining: int | None = None
    tokens_reset: float | None = None
    budget_limit: int | None = None
    budget_remaining: int | None = None
    budget_reset: float | None = None  # None for a "total" budget: it never resets


NO_RATE_INFO = RateInfo()


@dataclass(slots=True, weakref_slot=True)  # (weak: the limiter renews leases only of reservations still referenced)
class Reservation:
    """What one admitted request holds; given back to ``extend``/``consume``/``settle`` of the same limiter."""

    id: str
    demand: Demand
    granted: int          # tokens the request may use
    second: int           # the second it was counted in (where its tokens are charged)
    backend: str          # "redis", "local" or "none"
    rate: RateInfo = NO_RATE_INFO
    used: int = 0         # tokens consumed so far (``consume``)
    settled: bool = field(default=False)

    @property
    def left(self) -> int:
        return self.granted - self.used


class RateLimited(Exception):
    """A refusal: which limit of which scope, and when to retry (``None``: not before the budget resets)."""

    def __init__(self, reason: str, scope: str, retry_after: float | None, rate: RateInfo) -> None:
        super().__init__(describe(reason, scope))
        self.reason = reason
        self.scope = scope
        self.retry_after = retry_after
        self.rate = rate


def describe(reason: str, scope: str) -> str:
    kind, _, name = scope.partition(":")
    whose = {"team": f"team {name}", "key": "this API key", "user": "this end user"}.get(kind, scope)
    return {
        "rpm": f"{whose} is at its limit of requests per minute",
        "tpm": f"{whose} is at its limit of tokens per minute",
        "tpm_too_large": f"the request's prompt alone exceeds the tokens per minute of {whose}",
        "max_concurrency": f"{whose} is at its limit of requests in flight",
        "budget": f"{whose} has used its token budget",
    }[reason]
