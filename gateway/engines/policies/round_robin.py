"""Round robin: each engine in turn, in the fleet's order; load, sessions and prefixes ignored."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.engines.engine import Engine
from gateway.engines.routing import RouteHints


class RoundRobin:
    name = "round_robin"

    def __init__(self) -> None:
        self._turn = -1

    def choose(self, candidates: Sequence[Engine], route: RouteHints | None,
               serving: Sequence[Engine]) -> tuple[Engine, str]:
        self._turn += 1
        return candidates[self._turn % len(candidates)], "round_robin"
