"""Least load: the engine with the lowest score (``Engine.score``); ties taken in turn.

Taking ties in turn (rather than always the first) spreads a burst that arrives while
every engine reads the same, e.g. at start, before this gateway's own counts separate them.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.engines.engine import Engine
from gateway.engines.routing import RouteHints


def least_loaded(candidates: Sequence[Engine], turn: int) -> Engine:
    if len(candidates) == 1:
        return candidates[0]
    scores = [engine.score() for engine in candidates]
    best = min(scores)
    tied = [engine for engine, score in zip(candidates, scores, strict=True) if score == best]
    return tied[turn % len(tied)]


class LeastLoad:
    name = "least_load"

    def __init__(self) -> None:
        self._turn = 0

    def choose(self, candidates: Sequence[Engine], route: RouteHints | None,
               serving: Sequence[Engine]) -> tuple[Engine, str]:
        self._turn += 1
        return least_loaded(candidates, self._turn), "least_load"
