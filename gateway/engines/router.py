"""Which engine takes a request: by model, then readiness, then the routing policy.

In this order: only engines serving the request's model qualify (``RouteHints.model``);
of those, only engines that are ready (their last look succeeded) and not ejected (no
recent failure), and not the ones this request already failed on; among them the policy
(``ROUTING_POLICY``, ``engines.policies``) chooses. When every engine serving the model is
ejected but some are ready, the one whose ejection ends first is used rather than refusing:
with a single engine a failure must not turn into seconds of refusals (Envoy's "panic
mode" reasons the same way). An engine that is not ready never gets a request.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection

from gateway.config import Settings
from gateway.engines.engine import Engine
from gateway.engines.errors import NO_ENGINE, EngineUnavailable
from gateway.engines.fleet import Fleet
from gateway.engines.policies import Policy
from gateway.engines.policies.affinity import AffinityPolicy
from gateway.engines.policies.least_load import LeastLoad
from gateway.engines.policies.prefix import PrefixAndLoad
from gateway.engines.policies.round_robin import RoundRobin
from gateway.engines.routing import RouteHints
from gateway.metric_updates import counting

EJECTED_FALLBACK = "ejected_fallback"
# The reasons that mean the engine is the one the request's prompt prefix (or affinity key, which
# keeps a conversation, hence its prefix, on one engine) hashes to: its KV blocks are likely cached
# there. Their ``*_overflow`` and ``*_repinned`` variants went elsewhere: a miss.
AFFINITY_HITS = frozenset({"prefix", "affinity"})


def make_policy(name: str, *, load_bound: float = 1.25) -> Policy:
    if name == "prefix":
        return PrefixAndLoad(load_bound=load_bound)
    if name in ("affinity", "session"):  # ("session": its name before, still accepted)
        return AffinityPolicy(load_bound=load_bound)
    if name == "least_load":
        return LeastLoad()
    if name == "round_robin":
        return RoundRobin()
    raise ValueError(f"unknown routing policy {name!r}")


class Router:
    def __init__(self, fleet: Fleet, policy: Policy, *, metrics=None) -> None:
        self.fleet = fleet
        self.policy = policy
        self._metrics = metrics
        self._decisions: dict[str, Callable[[float], None]] = {}  # reason -> its counter child's inc
        # The last pick's reason and candidates, for the trace's routing receipt (``gateway.tracing``),
        # read right after ``pick`` returns (synchronously: no other pick in between).
        self.last_reason: str | None = None
        self.last_candidates: list[Engine] = []
        self.last_affinity_hit = False  # the last pick went where its prefix or key hashes to

    @classmethod
    def from_settings(cls, settings: Settings, fleet: Fleet, *, metrics=None) -> Router:
        return cls(fleet, make_policy(settings.routing_policy, load_bound=settings.routing_load_bound),
                   metrics=metrics)

    @property
    def uses_prefix(self) -> bool:
        """Whether the policy reads ``RouteHints.prefix`` (protocols skip computing it otherwise)."""
        return isinstance(self.policy, PrefixAndLoad) and self.fleet.many

    def pick(self, route: RouteHints | None, exclude: Collection[Engine] = ()) -> Engine | None:
        """The engine for ``route`` (None when no engine can take it)."""
        model = route.model if route is not None else None
        avoid = route.avoid if route is not None else ()
        serving = [engine for engine in self.fleet.engines
                   if (model is None or model in engine.models) and engine not in exclude and engine.id not in avoid]
        if not serving:
            return None
        now = time.monotonic()
        candidates = [engine for engine in serving if engine.routable(now)]
        if candidates:
            engine, reason = self.policy.choose(candidates, route, serving)
        else:
            ready = [engine for engine in serving if engine.ready]
            if not ready:
                return None
            engine, reason = min(ready, key=lambda e: e.ejected_until), EJECTED_FALLBACK
        self.count(reason)
        self.last_reason, self.last_candidates = reason, candidates
        self.last_affinity_hit = reason in AFFINITY_HITS
        return engine

    def count(self, reason: str) -> None:
        if self._metrics is None:
            return
        inc = self._decisions.get(reason)
        if inc is None:
            inc = self._decisions[reason] = counting(self._metrics.routing_decisions.labels(self.policy.name, reason))
        inc(1)

    def unavailable(self, route: RouteHints | None) -> EngineUnavailable:
        """The 503 for a request no engine can take."""
        model = route.model if route is not None else None
        if model is not None and any(model in engine.models for engine in self.fleet.engines):
            message = f"no inference engine serving '{model}' is ready"
        elif self.fleet.engines:
            message = "no inference engine is ready"
        else:
            message = "no inference engine is known (none discovered yet)"
        return EngineUnavailable(message, kind=NO_ENGINE)
