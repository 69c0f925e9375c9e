"""What the flow reports to /metrics, recorded by the scheduler itself as things happen.

``gateway_queue_length{model,band}`` (requests waiting now), ``gateway_queue_wait_seconds{model,band}``
(how long dispatched requests waited; 0 for those that never queued) and
``gateway_queue_dropped{model,band,reason}`` (requests that left the queue unserved, by reason:
``queue_full``, ``key_queue_full``, ``timeout``, ``displaced``, ``cancelled``, ``shutdown``). The families
are declared in ``gateway.http.metrics``; label children are looked up once per (model, band):
``labels()`` is not free per request. Models are the served models (aliases resolved), bands
the configured ones, so the label sets stay bounded.
"""

from __future__ import annotations


class _Nothing:
    def set(self, value: float) -> None:
        return None

    def observe(self, value: float) -> None:
        return None

    def inc(self, amount: float = 1) -> None:
        return None


NOTHING = _Nothing()


class BandMetrics:
    """One (model, band)'s metric children (``wait``: the wait histogram's ``observe``, its fast path)."""

    __slots__ = ("length", "wait", "_dropped", "_family", "_labels")

    def __init__(self, metrics, model: str, band: str) -> None:
        if metrics is None:
            self.length = NOTHING
            self.wait = NOTHING.observe
            self._family = None
        else:
            self.length = metrics.queue_length.labels(model, band)
            self.wait = metrics.queue_wait_observer(model, band)
            self._family = metrics.queue_dropped
        self._labels = (model, band)
        self._dropped: dict[str, object] = {}

    def dropped(self, reason: str) -> None:
        if self._family is None:
            return
        child = self._dropped.get(reason)
        if child is None:
            child = self._dropped[reason] = self._family.labels(*self._labels, reason)
        child.inc()
