"""The default: key affinity, else prefix affinity, else least load (all load-aware).

A request with an affinity key follows it (``policies.affinity``). Otherwise requests that
share a prompt prefix (``engines.routing.openai_prefix``: a conversation's opening, a
completion's leading part) go to the engine the prefix hashes to, with the same bounded
loads: that engine has the prefix's KV blocks cached from the earlier requests, so vLLM
skips their prefill. The choice is a function of the request and the engine list, not of
per-process tables, so every gateway replica sends a prefix to the same engine (tables built
per replica drift apart, as AIBrix found until it synchronised them through Redis). The
price: the hash does not know what an engine evicted, and a prefix shared by many requests
stays on one engine until its load spills it over.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.engines.engine import Engine
from gateway.engines.policies.affinity import affinity_choice
from gateway.engines.policies.least_load import least_loaded
from gateway.engines.routing import RouteHints


class PrefixAndLoad:
    name = "prefix"

    def __init__(self, *, load_bound: float) -> None:
        self.load_bound = load_bound
        self._turn = 0

    def choose(self, candidates: Sequence[Engine], route: RouteHints | None,
               serving: Sequence[Engine]) -> tuple[Engine, str]:
        if route is not None:
            if route.affinity_key:
                return affinity_choice("affinity", route.affinity_key, candidates, serving, self.load_bound)
            if route.prefix:
                return affinity_choice("prefix", route.prefix, candidates, serving, self.load_bound)
        self._turn += 1
        return least_loaded(candidates, self._turn), "least_load"
