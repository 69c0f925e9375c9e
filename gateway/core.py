"""The core: what protocols and features are given at assembly, the one thing this word names.

``create_app`` builds one ``Core`` from the settings and hands it to every protocol's
route factory and to every feature; nothing below reaches for ``app.state``. The stream
backend is typed by its interface (``relay.call.StreamBackend``): the plain relay, or
resumable sessions, chosen by ``SESSION_STORE``. What concerns one request travels apart,
in its ``RequestContext`` (``http.context``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.config import Settings
from gateway.engines.client import EngineClient
from gateway.engines.state import EngineState
from gateway.http.admission import Admission
from gateway.http.errors import ErrorShapes
from gateway.http.metrics import Metrics
from gateway.relay.call import Relay, StreamBackend
from gateway.relay.ending import SHUTDOWN


@dataclass
class Core:
    settings: Settings
    metrics: Metrics
    engines: EngineClient        # how requests reach the engines (routed by hints, with failover)
    engine_state: EngineState    # readiness, served models and their names, over the whole fleet
    admission: Admission
    error_shapes: ErrorShapes
    relay: Relay                 # what every stream and relayed call shares
    streams: StreamBackend       # how streams reach clients
    # Called once when the server starts stopping, with the seconds left before it cuts
    # open connections (``gateway.serving``).
    drain_hooks: list[Callable[[float], None]] = field(default_factory=list)
    draining: bool = False

    def begin_drain(self, grace_seconds: float) -> None:
        """The server is stopping: every stream gets its explicit ending before connections are cut.

        Plain streams run on until a second before the grace period ends (most finish);
        the drain hooks (sessions) decide for theirs.
        """
        if self.draining:
            return
        self.draining = True
        asyncio.get_running_loop().call_later(max(0.0, grace_seconds - 1.0), self.relay.live.end_all, SHUTDOWN)
        for hook in self.drain_hooks:
            hook(grace_seconds)
