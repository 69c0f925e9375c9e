"""What the relay core needs for one request, and what a protocol asks it to stream.

``RelayContext`` is per request (who, which request id, how errors are shaped); a
``StreamCall`` is what a protocol hands to the stream backend: the engine request, its
dialect, and what the client asked of the stream. The protocol builds both; the backend
(plain relay or resumable sessions) decides how the stream reaches the client.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Protocol

from starlette.responses import Response

from gateway.engines.client import EngineClient
from gateway.engines.routing import NO_HINTS, RouteHints
from gateway.engines.stream import EngineStream
from gateway.http.errors import ErrorShape
from gateway.http.metrics import Metrics
from gateway.relay.continuation import Continuation
from gateway.relay.dialect import StreamDialect
from gateway.relay.pump import CompletionHook


class LiveStreamsLike(Protocol):
    ending: bool

    def add(self, task) -> None: ...
    def discard(self, task) -> None: ...


@dataclass(slots=True)
class RelayContext:
    engines: EngineClient
    metrics: Metrics
    key_id: str               # Principal.key_id: owner of sessions, label of usage counters
    request_id: str
    keepalive_seconds: float
    error_shape: ErrorShape   # how errors before the stream starts are written
    live_streams: LiveStreamsLike | None = None  # plain streams register here, so a drain can end them
    affinity_key: str | None = None  # the client's x-session-affinity header: wins over the body's keys

    def route(self, route: RouteHints | None) -> RouteHints | None:
        """``route`` with this request's affinity header applied."""
        if self.affinity_key is None:
            return route
        return replace(route or NO_HINTS, affinity_key=self.affinity_key)

    def opener(self, call: StreamCall) -> Callable[[], Awaitable[EngineStream]]:
        """What opens ``call``'s engine stream (for ``relay.opening.open_watching``)."""
        route = self.route(call.route)
        return lambda: self.engines.open_stream(call.path, call.body, request_id=self.request_id, route=route)


@dataclass(slots=True)
class StreamCall:
    path: str                 # the engine route, e.g. /v1/chat/completions
    body: bytes               # what goes to the engine
    dialect: StreamDialect
    relay_usage: bool = False  # the client asked for the usage event
    session_id: str | None = None  # the client named a resumable session
    choices: int = 1
    model: object = None
    on_complete: CompletionHook | None = None
    resume_from: str | None = None  # Last-Event-ID as sent, when the request resumes a session
    route: RouteHints | None = None  # where the engine layer should send it (a fleet reads it)
    # How to produce the stream again elsewhere when its engine fails mid-stream (sessions only).
    continuation: Continuation | None = None


class StreamBackend(Protocol):
    """How streams reach clients: relayed straight through, or through resumable sessions."""

    resumable: bool

    async def stream(self, call: StreamCall, ctx: RelayContext) -> Response: ...
