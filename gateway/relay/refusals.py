"""A request that failed before the engine answered: refused by the gateway itself, or failed by the engine.

The two are counted apart, because an operator acts differently on each:

- ``gateway_rejected_total{reason}``: the gateway refused the request and no engine was asked:
  a key's, team's or end user's limits (``rate_limit``, ``budget``), the limiter unable to check
  them (``limits_unavailable``: Redis down under ``LIMITS_WHEN_REDIS_DOWN=closed``), the flow-control
  queue (its code: ``queue_full``, ``key_queue_full``, ``queue_timeout``, ``queue_displaced``,
  ``shutdown``), the gateway's own 4xx checks of the request as the stream or call starts
  (their code: ``model_not_allowed``, ``invalid_priority``, ``invalid_value``, ...; a client
  error said without HTTP, ``Invalid``/``NotFound``/``Conflict``/``Gone``, by its code or kind);
  the middleware counts its own refusals there too (``auth``, ``admission``, ...). A stream cut
  because its key's budget ran out is counted there as well (``budget``), not as a broken stream.
- ``gateway_upstream_errors_total{kind}``: everything else: the engine could not be reached,
  refused, timed out or broke the exchange (an engine's own 4xx included: it is the engine's answer).
"""

from __future__ import annotations

from typing import Any

from gateway.engines.errors import CONNECT_TIMEOUT, NO_ENGINE, REFUSED, EngineError
from gateway.failures import Conflict, Failure, Gone, Invalid, LimitReached, NotFound, Unavailable
from gateway.http.errors import GatewayError
from gateway.http.queueing import QueueRefusal

# An engine failure of one of these kinds means no engine received the request (the last attempt's kind).
_NOT_SENT_KINDS = frozenset({REFUSED, CONNECT_TIMEOUT, NO_ENGINE})
# A limit refusal's code (relay.metering) -> its reason label.
_LIMIT_REASONS = {"rate_limit_exceeded": "rate_limit", "insufficient_quota": "budget"}
LIMITS_UNAVAILABLE = "limits_unavailable"
# Client errors said without HTTP (``gateway.failures``) -> the reason when they carry no code.
_CLIENT_ERRORS = {Invalid: "invalid", NotFound: "not_found", Conflict: "conflict", Gone: "gone"}


def refusal_reason(error: Failure | None) -> str | None:
    """The reason label when the gateway itself refused the request; None for an upstream failure."""
    if isinstance(error, QueueRefusal):
        return error.code or "queue"
    if isinstance(error, LimitReached):
        return _LIMIT_REASONS.get(error.code or "", error.code or "limit")
    if isinstance(error, Unavailable) and error.code == LIMITS_UNAVAILABLE:
        return LIMITS_UNAVAILABLE
    if isinstance(error, EngineError):
        return None
    if isinstance(error, GatewayError):
        return (error.code or f"http_{error.status}") if error.status < 500 else None
    for kind, reason in _CLIENT_ERRORS.items():
        if isinstance(error, kind):
            return error.code or reason
    return None


def count_failure(metrics: Any, error: Failure) -> None:
    """Count ``error`` (no stream opened, no answer relayed) as a refusal or as an upstream error."""
    if not count_refusal(metrics, error):
        metrics.upstream_errors.labels(error.code or getattr(error, "kind", "error")).inc()


def count_refusal(metrics: Any, error: Failure | None) -> bool:
    """Count ``error`` if it is the gateway's own refusal; whether it was."""
    reason = refusal_reason(error)
    if reason is None:
        return False
    metrics.rejected.labels(reason).inc()
    return True


def reached_engine(error: BaseException | None) -> bool:
    """Whether the request that failed with ``error`` was received by an engine (None: it may have been).

    False for the gateway's own refusals (its limits, its queue, a 4xx of its request checks)
    and for an engine that could not be connected to, or no engine to take it: such a request
    never ran, and gives back its request in its key's ``rpm`` as well as its tokens.
    """
    if error is None or not isinstance(error, Failure):
        return True
    if isinstance(error, EngineError):
        return getattr(error, "kind", None) not in _NOT_SENT_KINDS
    return not (refusal_reason(error) is not None or isinstance(error, GatewayError))
