"""A grant's or a refusal's figures as the headers clients read: OpenAI's and Anthropic's.

OpenAI (``x-ratelimit-*``): limit and remaining as integers, resets as durations (``1s``,
``6m0s``, ``20ms``), as api.openai.com sends them. Anthropic (``anthropic-ratelimit-*``):
resets as RFC 3339 times. A refusal adds ``retry-after`` (whole seconds, at least 1). Budgets
have no standard header: ``x-gateway-budget-{limit,remaining,reset}`` carry them on both.
"""

from __future__ import annotations

import datetime as dt
import math

from gateway.tenancy.limits.model import RateInfo, RateLimited


def duration(seconds: float) -> str:
    """OpenAI's form of a duration: ``20ms``, ``1.5s``, ``6m0s``, ``1h2m3s``."""
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))}ms"
    if seconds < 60:
        return f"{round(seconds, 3):g}s"
    whole = math.ceil(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return (f"{hours}h" if hours else "") + f"{minutes}m{secs}s"


def retry_after(seconds: float | None) -> str | None:
    return None if seconds is None else str(max(1, math.ceil(seconds)))


# OpenAI's header names, encoded once (the headers go on every answer of a limited key).
_OPENAI_NAMES = {kind: (f"x-ratelimit-limit-{kind}".encode(), f"x-ratelimit-remaining-{kind}".encode(),
                        f"x-ratelimit-reset-{kind}".encode()) for kind in ("requests", "tokens")}


def openai_headers(rate: RateInfo) -> list[tuple[bytes, bytes]]:
    headers: list[tuple[bytes, bytes]] = []
    for names, limit, remaining, reset in ((_OPENAI_NAMES["requests"], rate.requests_limit, rate.requests_remaining,
                                            rate.requests_reset),
                                           (_OPENAI_NAMES["tokens"], rate.tokens_limit, rate.tokens_remaining,
                                            rate.tokens_reset)):
        if limit is not None:
            headers += ((names[0], b"%d" % limit), (names[1], b"%d" % remaining),
                        (names[2], duration(reset or 0.0).encode()))
    if rate.budget_limit is not None:
        headers += _encoded(_budget(rate))
    return headers


def anthropic_headers(rate: RateInfo, *, now: dt.datetime | None = None) -> list[tuple[bytes, bytes]]:
    now = now or dt.datetime.now(dt.UTC)
    headers: list[tuple[str, str]] = []
    for kind, limit, remaining, reset in (("requests", rate.requests_limit, rate.requests_remaining,
                                            rate.requests_reset),
                                           ("tokens", rate.tokens_limit, rate.tokens_remaining, rate.tokens_reset)):
        if limit is not None:
            at = (now + dt.timedelta(seconds=reset or 0.0)).replace(microsecond=0)
            headers += [(f"anthropic-ratelimit-{kind}-limit", str(limit)),
                        (f"anthropic-ratelimit-{kind}-remaining", str(remaining)),
                        (f"anthropic-ratelimit-{kind}-reset", at.isoformat().replace("+00:00", "Z"))]
    return _encoded(headers + _budget(rate))


def refusal_headers(refusal: RateLimited, *, anthropic: bool = False) -> list[tuple[bytes, bytes]]:
    """The headers of a 429: ``retry-after`` and the family's rate-limit set."""
    headers = anthropic_headers(refusal.rate) if anthropic else openai_headers(refusal.rate)
    after = retry_after(refusal.retry_after)
    return ([(b"retry-after", after.encode())] if after is not None else []) + headers


def _budget(rate: RateInfo) -> list[tuple[str, str]]:
    if rate.budget_limit is None:
        return []
    headers = [("x-gateway-budget-limit", str(rate.budget_limit)),
               ("x-gateway-budget-remaining", str(rate.budget_remaining))]
    if rate.budget_reset is not None:
        headers.append(("x-gateway-budget-reset", duration(rate.budget_reset)))
    return headers


def _encoded(headers: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    return [(name.encode(), value.encode()) for name, value in headers]
