"""What a protocol asks the relay to stream, and what every stream of this process shares.

A ``StreamCall`` is one streamed request as its protocol prepared it: the engine request, its
dialect, what the client asked of the stream, and how to produce it again elsewhere. The
protocol builds it; the stream backend (the plain relay, or resumable sessions) decides how
its events reach clients, and the runner (``relay.run``) runs it. ``Relay`` is what every run
of the process shares, made once at assembly.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from starlette.responses import Response

from gateway.engines.client import EngineClient
from gateway.engines.routing import NO_HINTS, RouteHints
from gateway.flow.control import FlowControl
from gateway.http.context import RequestContext
from gateway.http.metrics import Metrics
from gateway.relay.continuation import Continuation
from gateway.relay.dialect import StreamDialect, StreamResult
from gateway.relay.live import LiveRuns

if TYPE_CHECKING:
    from gateway.relay.metering import Meter

CompletionHook = Callable[[StreamResult], Awaitable[None]]


@dataclass(slots=True)
class StreamCall:
    path: str                 # the engine route, e.g. /v1/chat/completions
    body: bytes               # what goes to the engine
    dialect: StreamDialect
    relay_usage: bool = False  # the client asked for the usage event
    session_id: str | None = None  # the client named a resumable session (or the protocol did: a response id)
    named: bool | None = None  # survives its clients leaving for a while; None: named when it has a session_id
    choices: int = 1
    model: object = None
    on_complete: CompletionHook | None = None  # told how the stream ended, once, whatever happened
    # Runs once the protocol's terminal event was read, before any client can receive it (a
    # Responses stream stores its final object there, so a client that reads the end finds it).
    before_end: Callable[[], Awaitable[None]] | None = None
    resume_from: str | None = None  # Last-Event-ID as sent, when the request resumes a session
    route: RouteHints | None = None  # where the engine layer should send it (a fleet reads it)
    # How to produce the stream again elsewhere when its engine fails mid-stream (resumable streams only).
    continuation: Continuation | None = None

    @property
    def is_named(self) -> bool:
        return self.named if self.named is not None else self.session_id is not None

    def hints(self, request: RequestContext) -> RouteHints | None:
        """Where to send it: its hints, with the request's affinity header applied."""
        return with_affinity(self.route, request)


def with_affinity(route: RouteHints | None, request: RequestContext) -> RouteHints | None:
    """``route`` with ``request``'s ``x-session-affinity`` header applied (it wins over the body's keys)."""
    if request.affinity_key is None:
        return route
    return replace(route or NO_HINTS, affinity_key=request.affinity_key)


@dataclass(slots=True)
class Relay:
    """What every run and relayed call of this process shares (made once by ``create_app``)."""

    engines: EngineClient
    metrics: Metrics
    keepalive_seconds: float
    live: LiveRuns  # the runs streaming to a client without a session: a stopping gateway ends each
    flow: FlowControl | None = None  # the queue generating requests wait in (None: FLOW_CONTROL off)
    meter: Meter | None = None  # limits and the usage ledger (relay.metering); None: neither


class StreamBackend(Protocol):
    """How streams reach clients: relayed straight through, or through resumable sessions."""

    resumable: bool

    async def stream(self, call: StreamCall, request: RequestContext) -> Response:
        """The streamed response of ``call`` (resumed from the session's log when it carries ``resume_from``)."""
