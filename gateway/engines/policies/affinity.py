"""Affinity: requests with the same affinity key go to the same engine while it can take them.

The key (``x-session-affinity``, a ``session_id``, a marketplace conversation, the OpenAI
``user``) is hashed onto the engines with bounded loads (``engines.hashing``): the same
engine on every gateway replica; the next engine in the key's ranking when its engine is
down, ejected or much busier than the fleet's mean (and back once it recovers, so a
conversation returns to where its prefix is cached). Requests without a key go to the least
loaded engine.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.engines.engine import Engine
from gateway.engines.hashing import bounded_choice, key_hash, top
from gateway.engines.policies.least_load import least_loaded
from gateway.engines.routing import RouteHints


def affinity_choice(kind: str, key: str | bytes, candidates: Sequence[Engine], serving: Sequence[Engine],
                    bound: float) -> tuple[Engine, str]:
    """The engine for an affinity ``key`` of ``kind`` ("affinity": a key the request names, or "prefix"), and why."""
    hashed = key_hash(key)
    engine, overflowed = bounded_choice(hashed, candidates, bound)
    if overflowed:
        return engine, f"{kind}_overflow"  # its engine is much busier than the rest
    if len(serving) > len(candidates) and top(hashed, serving) is not engine:
        return engine, f"{kind}_repinned"  # its engine cannot take requests now
    return engine, kind


class AffinityPolicy:
    name = "affinity"

    def __init__(self, *, load_bound: float) -> None:
        self.load_bound = load_bound
        self._turn = 0

    def choose(self, candidates: Sequence[Engine], route: RouteHints | None,
               serving: Sequence[Engine]) -> tuple[Engine, str]:
        if route is not None and route.affinity_key:
            return affinity_choice("affinity", route.affinity_key, candidates, serving, self.load_bound)
        self._turn += 1
        return least_loaded(candidates, self._turn), "least_load"
