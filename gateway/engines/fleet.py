"""The engines behind the gateway, as one set: membership, per-engine counters, ejection.

Membership comes from ``engines.discovery`` (a fixed list, or DNS): ``replace`` keeps the
state of engines that stay (their health, load and ejection), adds new ones (not ready
until a look says so) and forgets the ones that left (requests already open on them finish
normally; their metric series are removed, so DNS churn does not grow the label set forever).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

from gateway.config import Settings
from gateway.engines.discovery import Member, static_members
from gateway.engines.engine import Engine
from gateway.metric_updates import counting

log = logging.getLogger("gateway.engine")


class EngineCounters:
    """One engine's metric children, looked up once (``labels()`` is not free per request)."""

    __slots__ = ("requests", "count_request", "retries", "_errors", "_metrics", "_id")

    def __init__(self, metrics, engine: Engine) -> None:
        self._metrics = metrics
        self._id = engine.id
        self.requests = metrics.engine_requests.labels(engine.id)
        self.count_request = counting(self.requests)  # (one call per attempt, not prometheus_client's three)
        self.retries = metrics.engine_retries.labels(engine.id)
        self._errors: dict[str, object] = {}
        metrics.engine_up.labels(engine.id).set_function(lambda: 1.0 if engine.routable(time.monotonic()) else 0.0)
        metrics.engine_inflight.labels(engine.id).set_function(lambda: float(engine.inflight))
        metrics.engine_load.labels(engine.id).set_function(engine.score)

    def error(self, kind: str) -> None:
        child = self._errors.get(kind)
        if child is None:
            child = self._errors[kind] = self._metrics.engine_errors.labels(self._id, kind)
        child.inc()

    def remove(self) -> None:
        for family in (self._metrics.engine_requests, self._metrics.engine_retries, self._metrics.engine_up,
                       self._metrics.engine_inflight, self._metrics.engine_load):
            try:
                family.remove(self._id)
            except KeyError:
                pass
        for kind in self._errors:
            try:
                self._metrics.engine_errors.remove(self._id, kind)
            except KeyError:
                pass


class _NoCounters:
    """Counters of a fleet built without metrics (unit tests of single parts)."""

    class _Nothing:
        def inc(self, amount: float = 1) -> None:
            return None

    requests = retries = _Nothing()
    count_request = requests.inc

    def error(self, kind: str) -> None:
        return None

    def remove(self) -> None:
        return None


NO_COUNTERS = _NoCounters()


class Fleet:
    def __init__(self, members: list[Member] = (), *, eject_seconds: float = 5.0, metrics=None,
                 discovered: bool = False) -> None:
        self.engines: list[Engine] = []
        self._by_id: dict[str, Engine] = {}
        self.eject_seconds = eject_seconds
        self.metrics = metrics
        self.discovered = discovered  # members come from DNS: there may be many at any time
        self.replace(list(members))
        if metrics is not None:
            metrics.watch_models(self.ready_by_model)

    @classmethod
    def from_settings(cls, settings: Settings, *, metrics=None) -> Fleet:
        return cls(static_members(settings), eject_seconds=settings.engine_eject_seconds, metrics=metrics,
                   discovered=bool(settings.vllm_dns_url))

    def __len__(self) -> int:
        return len(self.engines)

    def __iter__(self) -> Iterator[Engine]:
        return iter(self.engines)

    def get(self, engine_id: str) -> Engine | None:
        return self._by_id.get(engine_id)

    @property
    def many(self) -> bool:
        """Whether requests may have more than one engine to choose from."""
        return self.discovered or len(self.engines) > 1

    def replace(self, members: list[Member]) -> list[Engine]:
        """Make the fleet exactly ``members``; returns the engines that are new."""
        wanted: dict[str, Engine] = {}
        added: list[Engine] = []
        for url, key in members:
            engine = Engine(url, key)
            existing = self._by_id.get(engine.id)
            if existing is not None and existing.headers == engine.headers:
                wanted[engine.id] = existing
            elif engine.id not in wanted:
                engine.counters = EngineCounters(self.metrics, engine) if self.metrics is not None else NO_COUNTERS
                wanted[engine.id] = engine
                added.append(engine)
        for engine_id, engine in self._by_id.items():
            if wanted.get(engine_id) is not engine:
                engine.counters.remove()
                log.info("engine left the fleet", extra={"engine": engine_id})
        for engine in added:
            if self._by_id:  # not at start-up: say who arrived
                log.info("engine joined the fleet", extra={"engine": engine.id})
        self._by_id = wanted
        self.engines = list(wanted.values())
        return added

    def ready_by_model(self) -> dict[str, int]:
        """Every model an engine serves (or served before it went down) -> its engines that can take requests."""
        now = time.monotonic()
        counts: dict[str, int] = {}
        for engine in self.engines:
            routable = engine.routable(now)
            for model in engine.models:
                counts[model] = counts.get(model, 0) + routable
        return counts

    def failed(self, engine: Engine, kind: str, message: str) -> None:
        """``engine`` failed a request: count it and give the engine a rest."""
        engine.counters.error(kind)
        seconds = engine.eject(self.eject_seconds, kind=kind, message=message)
        log.warning("engine ejected", extra={"engine": engine.id, "kind": kind, "reason": message,
                                             "seconds": seconds})
