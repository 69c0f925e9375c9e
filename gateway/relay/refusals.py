"""A request that failed before the engine answered: refused by the gateway itself, or failed by the engine.

The two are counted apart, because an operator acts differently on each:

- ``gateway_rejected_total{reason}``: the gateway refused the request and no engine was asked:
  a key's, team's or end user's limits (``rate_limit``, ``budget``), the limiter unable to check
  them (``limits_unavailable``: Redis down under ``LIMITS_WHEN_REDIS_DOWN=closed``), the flow-control
  queue (its code: ``queue_full``, ``key_queue_full``, ``queue_timeout``, ``queue_displaced``,
  ``shutdown``); the middleware counts its own refusals there too (``auth``, ``admission``, ...).
- ``gateway_upstream_errors_total{kind}``: everything else: the engine could not be reached,
  refused, timed out or broke the exchange.
"""

from __future__ import annotations

from typing import Any

from gateway.failures import Failure, LimitReached, Unavailable
from gateway.http.queueing import QueueRefusal

# A limit refusal's code (relay.metering) -> its reason label.
_LIMIT_REASONS = {"rate_limit_exceeded": "rate_limit", "insufficient_quota": "budget"}
LIMITS_UNAVAILABLE = "limits_unavailable"


def refusal_reason(error: Failure) -> str | None:
    """The reason label when the gateway itself refused the request; None for an upstream failure."""
    if isinstance(error, QueueRefusal):
        return error.code or "queue"
    if isinstance(error, LimitReached):
        return _LIMIT_REASONS.get(error.code or "", error.code or "limit")
    if isinstance(error, Unavailable) and error.code == LIMITS_UNAVAILABLE:
        return LIMITS_UNAVAILABLE
    return None


def count_failure(metrics: Any, error: Failure) -> None:
    """Count ``error`` (no stream opened, no answer relayed) as a refusal or as an upstream error."""
    if not count_refusal(metrics, error):
        metrics.upstream_errors.labels(error.code or getattr(error, "kind", "error")).inc()


def count_refusal(metrics: Any, error: Failure) -> bool:
    """Count ``error`` if it is the gateway's own refusal; whether it was."""
    reason = refusal_reason(error)
    if reason is None:
        return False
    metrics.rejected.labels(reason).inc()
    return True
