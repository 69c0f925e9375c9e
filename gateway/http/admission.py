"""Admission control: a global and a per-key cap on requests in flight.

Plain counters, no locks: everything runs on one event loop and
``try_enter``/``leave`` never await, so they are atomic with respect to it.
A request beyond either cap is refused at once (429 + Retry-After) rather than
queued, so clients back off instead of piling latency onto the engine.
"""

from __future__ import annotations


class Admission:
    def __init__(self, *, max_inflight: int, max_inflight_per_key: int) -> None:
        self.max_inflight = max_inflight
        self.max_inflight_per_key = max_inflight_per_key
        self.inflight = 0
        self._per_key: dict[str, int] = {}

    def try_enter(self, key_id: str) -> str | None:
        """Admit one request for ``key_id``; on refusal, the reason (nothing is counted)."""
        if self.inflight >= self.max_inflight:
            return f"the gateway is at its limit of {self.max_inflight} requests in flight"
        held = self._per_key.get(key_id, 0)
        if held >= self.max_inflight_per_key:
            return f"this API key is at its limit of {self.max_inflight_per_key} requests in flight"
        self.inflight += 1
        self._per_key[key_id] = held + 1
        return None

    def leave(self, key_id: str) -> None:
        self.inflight -= 1
        held = self._per_key[key_id] - 1
        if held:
            self._per_key[key_id] = held
        else:
            del self._per_key[key_id]  # keeps the map bounded by keys actually in flight
