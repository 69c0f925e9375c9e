"""Prometheus children updated on the request path in one call each (``counting``, ``observing``).

prometheus_client's ``inc`` and ``observe`` check the labels and the amount on every call and
walk a histogram's bounds in Python; a request updates a dozen children, so the request path
keeps each child's update as one callable instead (docs/benchmarks.md, "The non-streamed
path"). Same exposition, bucket for bucket (tests/gateway/http/test_metric_fast_paths.py).
Below every layer that records metrics (``http``, ``engines``, ``tracing``).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable

from prometheus_client import Counter, Histogram

# A model label's values: the first this many names a process sees, then "other" (a model name
# can come from outside, an engine's list or a feature's request: its series stay bounded).
MAX_MODEL_LABELS = 64
OTHER_MODEL = "other"


def counting(child: Counter) -> Callable[[float], None]:
    """``child.inc`` for the request path: its value's own ``inc``, one call instead of three.

    prometheus_client's ``inc`` checks on every call that the metric's labels are set (a child
    from ``labels()`` always has them) and that the amount is not negative; callers pass
    positive constants or checked amounts. Falls back to ``child.inc`` where the value is not
    reachable (another prometheus_client).
    """
    inc = getattr(getattr(child, "_value", None), "inc", None)
    return inc if callable(inc) else child.inc


def observing(child: Histogram) -> Callable[[float], None]:
    """``child.observe`` for the request path: the same sum and bucket, the bucket found by bisection
    (prometheus_client walks the bounds in Python and checks the labels on every call)."""
    bounds = getattr(child, "_upper_bounds", None)
    buckets = getattr(child, "_buckets", None)
    total = getattr(child, "_sum", None)
    if not bounds or buckets is None or len(buckets) != len(bounds) or not callable(getattr(total, "inc", None)):
        return child.observe
    bounds = tuple(bounds)
    incs = tuple(bucket.inc for bucket in buckets)
    add = total.inc
    last = len(incs)

    def observe(amount: float) -> None:
        add(amount)
        index = bisect_left(bounds, amount)
        if index < last and amount == amount:  # (NaN falls in no bucket, as in prometheus_client)
            incs[index](1)

    return observe
