"""The assembled gateway core: what protocols and features are given at assembly.

``create_app`` builds one ``Core`` from the settings and hands it to every protocol's
route factory and to every feature; nothing below reaches for ``app.state``. The stream
backend is typed by its interface (``relay.context.StreamBackend``): the plain relay, or
resumable sessions, chosen by ``SESSION_STORE``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.config import Settings
from gateway.engines.client import EngineClient
from gateway.engines.state import EngineState
from gateway.http.admission import Admission
from gateway.http.errors import ErrorShape, ErrorShapes
from gateway.http.metrics import Metrics
from gateway.relay.context import RelayContext, StreamBackend
from gateway.relay.plain import LiveStreams

AFFINITY_HEADER = b"x-session-affinity"
MAX_AFFINITY_KEY = 256


@dataclass
class Core:
    settings: Settings
    metrics: Metrics
    engines: EngineClient        # how requests reach the engines (routed by hints, with failover)
    engine_state: EngineState    # readiness, served models and their names, over the whole fleet
    admission: Admission
    error_shapes: ErrorShapes
    streams: StreamBackend       # how streams reach clients
    # Called once when the server starts stopping, with the seconds left before it cuts
    # open connections (``gateway.serving``).
    drain_hooks: list[Callable[[float], None]] = field(default_factory=list)
    draining: bool = False
    live_streams: LiveStreams = field(default_factory=LiveStreams)  # plain streams in flight

    def begin_drain(self, grace_seconds: float) -> None:
        """The server is stopping: every stream gets its explicit ending before connections are cut.

        Plain streams run on until a second before the grace period ends (most finish);
        the drain hooks (sessions) decide for theirs.
        """
        if self.draining:
            return
        self.draining = True
        asyncio.get_running_loop().call_later(max(0.0, grace_seconds - 1.0), self.live_streams.end_all)
        for hook in self.drain_hooks:
            hook(grace_seconds)

    def relay_context(self, scope: dict, *, error_shape: ErrorShape | None = None) -> RelayContext:
        """The relay core's view of one request (its principal, id, and error shape)."""
        state = scope["state"]
        principal = state.get("principal")
        return RelayContext(
            engines=self.engines,
            metrics=self.metrics,
            key_id=principal.key_id if principal is not None else "-",
            request_id=state["request_id"],
            keepalive_seconds=self.settings.sse_keepalive_seconds,
            error_shape=error_shape or self.error_shapes.for_path(scope["path"]),
            live_streams=self.live_streams,
            affinity_key=affinity_header(scope),
        )


def affinity_header(scope: dict) -> str | None:
    """The request's ``x-session-affinity`` header: requests naming the same value stick to one engine."""
    for name, value in scope["headers"]:
        if name == AFFINITY_HEADER:
            return value[:MAX_AFFINITY_KEY].decode("latin-1") or None
    return None
