"""Routing policies, one module each; ``ROUTING_POLICY`` names one (``engines.router`` applies it).

A policy chooses among the engines that may take the request (ready, not ejected, serving
its model) and says why, as a short reason counted in ``gateway_routing_decisions_total``.
``serving`` lists every engine serving the model, also those that cannot take it now, so a
policy can tell that an affinity had to move (re-pinned).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from gateway.engines.engine import Engine
from gateway.engines.routing import RouteHints


class Policy(Protocol):
    name: str

    def choose(self, candidates: Sequence[Engine], route: RouteHints | None,
               serving: Sequence[Engine]) -> tuple[Engine, str]:
        """One of ``candidates`` (never empty) for ``route``, and the reason."""

