"""A request as the flow sees it (``Demand``), and what it gets when it may go (``Grant``).

The request path builds a ``Demand`` once it knows the model (aliases resolved), the key and
team (with their limits, band and weight) and the band the request runs in
(``bands.resolve_band``). ``tokens`` is its estimated cost: its prompt's tokens (about a
quarter of its bytes) plus the completion it may ask for (``max_tokens``, or a default); the
fairness corrects it once the real usage is known.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from gateway.flow.bands import Band


class Releases(Protocol):
    """Who takes a grant back (the scheduler)."""

    def release(self, grant: Grant, tokens: int | None) -> None: ...

    def moved(self, grant: Grant, engine: Any) -> None: ...


@dataclass(slots=True)
class Demand:
    model: str
    key_id: str
    band: Band
    team_id: str | None = None
    weight: float = 1.0            # the tenant's share relative to others of its band
    key_limit: int | None = None   # requests in flight the key may hold (None: no limit of its own)
    team_limit: int | None = None  # requests in flight the team may hold
    tokens: int = 1                # estimated cost: prompt + completion tokens
    route: Any = None              # what the engine picker needs (``RouteHints``)
    capped: bool = False           # counts against MAX_INFLIGHT(_PER_KEY) (a client's request; ``caps``)
    routed: str | None = None      # why the picker chose the granted engine (for the trace's receipt)
    # Who shares fairly with whom: the team, or the key when it has none.
    tenant: str = field(init=False)

    def __post_init__(self) -> None:
        if not self.weight > 0:
            raise ValueError(f"a fairness weight is positive; got {self.weight!r}")
        self.tenant = f"team:{self.team_id}" if self.team_id is not None else f"key:{self.key_id}"


class Grant:
    """Leave to send one request to ``engine`` (None: no engine was routable; the router says why).

    Release it exactly once when the request ends, with the tokens it was served (prompt plus
    completion; None when unknown: the estimate stands). Releasing again does nothing.
    """

    __slots__ = ("demand", "engine", "waited", "released", "_scheduler")

    def __init__(self, scheduler: Releases, demand: Demand, engine: Any, waited: float) -> None:
        self._scheduler = scheduler
        self.demand = demand
        self.engine = engine
        self.waited = waited  # seconds spent queued (0.0 when it never queued)
        self.released = False

    @property
    def wait_ms(self) -> int:
        """The ``x-queue-wait-ms`` header's value: whole milliseconds spent queued."""
        return int(self.waited * 1000 + 0.5)

    def release(self, tokens: int | None = None) -> None:
        if not self.released:
            self.released = True
            self._scheduler.release(self, tokens)

    def moved(self, engine: Any) -> None:
        """The request went to another ``engine`` (a retry after its first failed before any byte)."""
        if not self.released and engine is not self.engine:
            self._scheduler.moved(self, engine)
            self.engine = engine

    def __repr__(self) -> str:
        return f"Grant({self.demand.model!r}, {self.demand.band.name}, key={self.demand.key_id!r}, " \
               f"waited={self.waited:.3f}, released={self.released})"


# The completion a request without ``max_tokens`` is assumed to ask for (the estimate is corrected
# by the usage at release; it only has to be of the right order).
DEFAULT_COMPLETION_ESTIMATE = 256


def estimated_tokens(body_bytes: int, max_tokens: object = None) -> int:
    """A request's cost before it runs: its prompt (about 4 bytes a token) plus the completion it may ask for."""
    wanted = isinstance(max_tokens, int) and not isinstance(max_tokens, bool) and max_tokens > 0
    completion = max_tokens if wanted else DEFAULT_COMPLETION_ESTIMATE
    return max(1, body_bytes // 4) + completion


QUEUE_WAIT_HEADER = b"x-queue-wait-ms"


def queue_wait_header(grant: Grant | None) -> tuple[bytes, bytes]:
    """The response header that says how long the request waited in the gateway's queue."""
    return QUEUE_WAIT_HEADER, str(grant.wait_ms if grant is not None else 0).encode()
