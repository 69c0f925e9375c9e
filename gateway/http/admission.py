"""Admission control: a global and a per-key cap on requests in flight, and which requests are control.

Plain counters, no locks: everything runs on one event loop and
``try_enter``/``leave`` never await, so they are atomic with respect to it.
A request beyond either cap is refused at once (429 + Retry-After) rather than
queued, so clients back off instead of piling latency onto the engine.

With flow control on (``FLOW_CONTROL``), the generating requests are not counted here: the
caps are flow control's to hold for them (``gateway.flow.caps``: they wait in its queue, and
are dispatched when a request ends), over the requests it let go plus the ones counted here
(``inflight``, ``held``). ``defer`` names their routes; a request admitted here that reaches
the queue all the same (a route not named) hands its slot over (``Slot.hand_over``), so no
request is counted twice. ``on_leave`` tells flow control that a request it does not count
ended, which may let a waiting one go. The requests counted here are still refused at once at
a cap, and the caps count what flow control let go too (``granted``): a key whose generations
fill ``MAX_INFLIGHT_PER_KEY`` gets a 429 for its model list as before, not a place in a queue.

Control requests (cancel a generation, look at its state, delete a stored response) start
no generation and free capacity rather than take it, so they must not be refused because
the key is at its cap: a client at ``MAX_INFLIGHT_PER_KEY`` has to be able to stop its own
stream. They are admitted in a pool of their own, of the same sizes (``ControlRequests``
says which requests those are, from the routes' own declarations), so they stay bounded
and cannot crowd out generations either. They are still authenticated and owner-checked
like every other request.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Protocol

from gateway.http.errors import GatewayError

# ``openapi_extra`` of a FastAPI route that is a control request (raw routes say ``control=True``);
# it also shows in the OpenAPI document, so clients can see which routes are never refused for
# being at the in-flight cap.
CONTROL_EXTRA = {"x-admission": "control"}
_PARAM = re.compile(r"{[a-zA-Z_][a-zA-Z0-9_]*}")


class Granted(Protocol):
    """The generating requests flow control let go and counts itself (``gateway.flow.caps.InflightCaps``)."""

    held: int

    def of(self, key_id: str) -> int: ...


class Admission:
    def __init__(self, *, max_inflight: int, max_inflight_per_key: int) -> None:
        self.max_inflight = max_inflight
        self.max_inflight_per_key = max_inflight_per_key
        self.inflight = 0
        self._per_key: dict[str, int] = {}
        self.deferred: frozenset[str] = frozenset()  # POST paths counted by flow control instead (``defer``)
        self.on_leave: Callable[[], None] | None = None
        self.granted: Granted | None = None

    def defer(self, paths: Iterable[str], on_leave: Callable[[], None], granted: Granted | None = None) -> None:
        """POSTs to ``paths`` are not counted here: flow control holds the caps for them (see above)."""
        self.deferred = frozenset(paths)
        self.on_leave = on_leave
        self.granted = granted

    def defer_also(self, paths: Iterable[str]) -> None:
        """More POST paths counted by flow control instead (features' routes that call the engine), when
        flow control took any (``defer``); without flow control every request is counted here."""
        if self.on_leave is not None:
            self.deferred = self.deferred | frozenset(paths)

    def counts(self, method: str, path: str) -> bool:
        return not (method == "POST" and path in self.deferred)

    def held(self, key_id: str) -> int:
        """The requests ``key_id`` has in flight, counted here."""
        return self._per_key.get(key_id, 0)

    def try_enter(self, key_id: str) -> str | None:
        """Admit one request for ``key_id``; on refusal, the reason (nothing is counted)."""
        granted = self.granted
        if self.inflight + (granted.held if granted is not None else 0) >= self.max_inflight:
            return f"the gateway is at its limit of {self.max_inflight} requests in flight"
        held = self._per_key.get(key_id, 0)
        if held + (granted.of(key_id) if granted is not None else 0) >= self.max_inflight_per_key:
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
        if self.on_leave is not None:
            self.on_leave()


class Slot:
    """One request's place in a pool: given back once, at its end or when flow control takes its count over."""

    __slots__ = ("pool", "key_id", "held")

    def __init__(self, pool: Admission, key_id: str) -> None:
        self.pool = pool
        self.key_id = key_id
        self.held = True

    def leave(self) -> None:
        if self.held:
            self.held = False
            self.pool.leave(self.key_id)

    hand_over = leave  # flow control counts the request from here on (it is about to queue)


def too_many_requests(reason: str) -> GatewayError:
    """The 429 of a refusal by admission control."""
    return GatewayError(429, reason, code="too_many_requests", headers={"retry-after": "1"})


class ControlRequests:
    """Which requests are control requests: (method, path template) pairs, e.g. ("POST", "/v1/cancel/{id}").

    Asked by the middleware before routing, for every authenticated request; one compiled
    pattern per method keeps that to a dict lookup and one regex match.
    """

    def __init__(self, routes: Iterable[tuple[str, str]] = ()) -> None:
        by_method: dict[str, list[str]] = {}
        for method, template in routes:
            by_method.setdefault(method, []).append(_template_pattern(template))
        self._patterns = {method: re.compile("|".join(f"(?:{p})" for p in patterns))
                          for method, patterns in by_method.items()}

    def matches(self, method: str, path: str) -> bool:
        pattern = self._patterns.get(method)
        return pattern is not None and pattern.fullmatch(path) is not None


def _template_pattern(template: str) -> str:
    pattern, position = "", 0
    for found in _PARAM.finditer(template):
        pattern += re.escape(template[position:found.start()]) + "[^/]+"
        position = found.end()
    return pattern + re.escape(template[position:])
