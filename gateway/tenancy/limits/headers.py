"""A grant's or a refusal's figures as the headers clients read: OpenAI's and Anthropic's.

OpenAI (``x-ratelimit-*``): limit and remaining as integers, resets as durations (``1s``,
``6m0s``, ``20ms``), as api.openai.com sends them. Anthropic (``anthropic-ratelimit-*``):
resets as RFC 3339 times, rounded up to the second (a client that waits until then is admitted).
A refusal adds ``retry-after`` (whole seconds, at least 1). Budgets
have no standard header: ``x-gateway-budget-{limit,remaining,reset}`` carry them on both.
"""

from __future__ import annotations

import datetime as dt
import math

from gateway.tenancy.limits.model import RateInfo, RateLimited


def duration(seconds: float) -> str:
    """OpenAI's form of a duration: ``20ms``, ``1.5s``, ``6m0s``, ``1h2m3s``."""
    return _duration_bytes(seconds).decode()


def _duration_bytes(seconds: float) -> bytes:
    """``duration`` as the header's bytes, formatted as bytes (one call per reset of every answer of a
    limited key: the text form is this, decoded)."""
    if seconds < 1:
        return b"%dms" % max(0, round(seconds * 1000))
    if seconds < 60:
        return b"%gs" % round(seconds, 3)
    whole = math.ceil(seconds)
    text = _WHOLE.get(whole)
    if text is None:
        hours, rest = divmod(whole, 3600)
        text = b"%dh%dm%ds" % (hours, *divmod(rest, 60)) if hours else b"%dm%ds" % divmod(rest, 60)
        if len(_WHOLE) >= _WHOLE_MAX:
            _WHOLE.clear()
        _WHOLE[whole] = text
    return text


# A minute or more is written in whole seconds (rounded up), so the same few texts recur: a window's
# reset is 60-61 s on every answer, a budget's the same figure for a whole second. Made once each.
_WHOLE_MAX = 4096
_WHOLE: dict[int, bytes] = {}


def retry_after(seconds: float | None) -> str | None:
    return None if seconds is None else str(max(1, math.ceil(seconds)))


# OpenAI's header names and the budget's, encoded once (the headers go on every answer of a limited key).
_REQUESTS = (b"x-ratelimit-limit-requests", b"x-ratelimit-remaining-requests", b"x-ratelimit-reset-requests")
_TOKENS = (b"x-ratelimit-limit-tokens", b"x-ratelimit-remaining-tokens", b"x-ratelimit-reset-tokens")
_BUDGET = (b"x-gateway-budget-limit", b"x-gateway-budget-remaining", b"x-gateway-budget-reset")


def openai_headers(rate: RateInfo) -> list[tuple[bytes, bytes]]:
    # Written out, not looped over the kinds, the figures unpacked once and each formatted straight to
    # bytes: one call per answer of a limited key.
    (requests_limit, requests_remaining, requests_reset, tokens_limit, tokens_remaining, tokens_reset,
     budget_limit, budget_remaining, budget_reset) = rate
    headers: list[tuple[bytes, bytes]] = []
    if requests_limit is not None:
        headers += ((_REQUESTS[0], b"%d" % requests_limit), (_REQUESTS[1], b"%d" % requests_remaining),
                    (_REQUESTS[2], _duration_bytes(requests_reset or 0.0)))
    if tokens_limit is not None:
        headers += ((_TOKENS[0], b"%d" % tokens_limit), (_TOKENS[1], b"%d" % tokens_remaining),
                    (_TOKENS[2], _duration_bytes(tokens_reset or 0.0)))
    if budget_limit is not None:
        headers += ((_BUDGET[0], b"%d" % budget_limit), (_BUDGET[1], b"%d" % budget_remaining))
        if budget_reset is not None:
            headers.append((_BUDGET[2], _duration_bytes(budget_reset)))
    return headers


def anthropic_headers(rate: RateInfo, *, now: dt.datetime | None = None) -> list[tuple[bytes, bytes]]:
    now = now or dt.datetime.now(dt.UTC)
    headers: list[tuple[str, str]] = []
    for kind, limit, remaining, reset in (("requests", rate.requests_limit, rate.requests_remaining,
                                            rate.requests_reset),
                                           ("tokens", rate.tokens_limit, rate.tokens_remaining, rate.tokens_reset)):
        if limit is not None:
            at = now + dt.timedelta(seconds=reset or 0.0)
            if at.microsecond:  # to the next whole second, never before the reset (as retry-after rounds up)
                at = at.replace(microsecond=0) + dt.timedelta(seconds=1)
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
