"""The gateway's own in-flight caps (``MAX_INFLIGHT``, ``MAX_INFLIGHT_PER_KEY``) as flow control counts them.

With flow control on, a generating request over a cap waits in the queue like one over its
key's ``max_concurrency`` (instead of the middleware's immediate 429), so the caps are
counted here, over two kinds of request:

- the grants not yet released (the requests flow control let go: ``held`` and, per key, the
  scheduler's own count);
- every other request in flight (a model list, an embedding, a control request's pool aside):
  ``others``, the middleware's admission counters, which no longer count the requests that
  queue (``gateway.http.admission``).

A request that waits at a key's cap is that key's own limit (429 when it times out); one that
waits at the gateway-wide cap waits for the fleet (503). Only requests of a client count
(``Demand.capped``): the batches' lines, work without a client, never did and still do not.
"""

from __future__ import annotations

from typing import Protocol


class OtherRequests(Protocol):
    """The requests in flight that do not queue (``gateway.http.admission.Admission``)."""

    inflight: int

    def held(self, key_id: str) -> int: ...


class InflightCaps:
    __slots__ = ("max_inflight", "max_per_key", "others", "held", "_per_key")

    def __init__(self, max_inflight: int | None = None, max_per_key: int | None = None,
                 others: OtherRequests | None = None) -> None:
        self.max_inflight = max_inflight  # None: no gateway-wide cap
        self.max_per_key = max_per_key    # None: no per-key cap
        self.others = others
        self.held = 0                     # grants of capped requests not yet released
        self._per_key: dict[str, int] = {}

    def enter(self, key_id: str) -> None:
        self.held += 1
        self._per_key[key_id] = self._per_key.get(key_id, 0) + 1

    def leave(self, key_id: str) -> None:
        self.held -= 1
        left = self._per_key[key_id] - 1
        if left:
            self._per_key[key_id] = left
        else:
            del self._per_key[key_id]  # bounded by the keys actually in flight

    def of(self, key_id: str) -> int:
        """The grants ``key_id``'s capped requests hold."""
        return self._per_key.get(key_id, 0)

    def full(self) -> bool:
        """The gateway holds ``MAX_INFLIGHT`` requests: no capped request goes until one ends."""
        cap = self.max_inflight
        if cap is None:
            return False
        others = self.others
        return self.held + (others.inflight if others is not None else 0) >= cap

    def key_full(self, key_id: str) -> bool:
        """``key_id`` holds ``MAX_INFLIGHT_PER_KEY`` requests."""
        cap = self.max_per_key
        if cap is None:
            return False
        others = self.others
        return self._per_key.get(key_id, 0) + (others.held(key_id) if others is not None else 0) >= cap
