"""One request as the gateway knows it: made once by the middleware, then passed explicitly.

:class:`RequestContext` holds every per-request fact the layers below the middleware need:
the request id, the principal (whose key), the route that serves it, its timing (when it
started, how long it waited on engines), and how to answer it (the ASGI ``send`` through the
middleware for the response start, the server's own ``send`` for body messages after it).
Raw routes get it as their one argument (``http.raw_routes``); the stream runner, the relays
and the engine client take it as a parameter.

Two places hold it besides the call chain, each because a library leaves no other way, and
nowhere else: the ASGI scope under :data:`SCOPE_KEY`, the only thing FastAPI routes and their
dependencies can reach (``request_context(request)``); and the context variable
:data:`current`, which the logging formatter reads for the ``request_id`` of every line (and
the feature API for features that pass only a request id: ``gateway.api``).

What the next issues add lives here too, without reshaping anything: a per-request fact
every request has (a key's team and limits, a priority band and fairness id, the time it
spent queued) becomes a slot of this class, set by the middleware or by the layer that
learns it; one only some requests carry (a token reservation, a trace span) goes in
:meth:`put`/:meth:`get`, keyed by its own type, allocated only when something is put.
Creating one costs one object: nothing else is allocated per request.

The JSON body the engine gets is parsed once, by the protocol that reads it: it keeps the
result with the very bytes it describes (:meth:`keep_parsed`), and the layers after it
(limits, tracing) read it with :meth:`parsed`, which answers only for those bytes, so a body
changed on the way (an output limit lowered) is never described by a stale payload.
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from starlette.types import Message, Receive, Scope, Send

if TYPE_CHECKING:
    from gateway.http.errors import ErrorShape

T = TypeVar("T")

SCOPE_KEY = "gateway.request"  # the scope's one entry of the gateway's (for FastAPI routes)
current: ContextVar[RequestContext | None] = ContextVar("gateway_request", default=None)


class Caller(Protocol):
    """Who a request is (``http.auth.Principal``, which knows its context, not the other way round)."""

    key_id: str


class StartHook:
    """What the middleware does to a response start (its headers, the overhead it measures)."""

    def started(self, request: RequestContext, message: Message) -> Message:
        return message


class RequestContext:
    __slots__ = ("request_id", "principal", "route", "path_params", "started", "engine_wait", "status", "scope",
                 "receive", "server_send", "affinity_key", "response_headers", "_hook", "_shapes", "_extensions",
                 "_body", "_payload")

    def __init__(self, request_id: str, *, scope: Scope | None = None, receive: Receive | None = None,
                 server_send: Send | None = None, principal: Caller | None = None,
                 affinity_key: str | None = None, hook: StartHook | None = None, shapes: Any = None,
                 started: float | None = None) -> None:
        self.request_id = request_id
        self.principal = principal
        self.route = None            # the RawRoute serving it (set by the raw router), else None
        self.path_params: dict[str, str] | None = None  # a templated raw route's parameters
        self.started = time.perf_counter() if started is None else started
        self.engine_wait = 0.0       # seconds spent waiting on engines: not the gateway's own time
        self.status: int | None = None  # the response's status once it started
        self.scope = scope
        self.receive = receive
        self.server_send = server_send  # the server's own send: body messages once the head went out
        self.affinity_key = affinity_key  # the x-session-affinity header: keeps related requests on one engine
        self.response_headers: tuple = ()  # what the middleware adds to the response start (CORS, add_response_header)
        self._hook = hook
        self._shapes = shapes
        self._extensions: dict[type, Any] | None = None
        self._body: bytes | None = None  # the engine body the protocol parsed...
        self._payload: dict | None = None  # ...and what it parsed it to (see keep_parsed)

    # --- who ---------------------------------------------------------------------------
    @property
    def key_id(self) -> str:
        """The caller's key id (``http.key_ids``): owner of what it creates, label of its usage."""
        principal = self.principal
        return principal.key_id if principal is not None else "-"

    # --- the body, parsed once ---------------------------------------------------------------
    def keep_parsed(self, body: bytes, payload: dict) -> None:
        """``payload`` is ``orjson.loads(body)``: kept for the layers that read ``body`` later.

        The protocol calls it with the engine body it built and the dict it built it from (or
        parsed it into); neither may change afterwards (a layer that changes the body makes new
        bytes, which :meth:`parsed` does not answer for).
        """
        self._body = body
        self._payload = payload

    def parsed(self, body: bytes | None) -> dict | None:
        """``body`` parsed, when it is the very bytes kept by :meth:`keep_parsed`; else None (parse it)."""
        return self._payload if body is not None and body is self._body else None

    # --- answering -----------------------------------------------------------------------
    async def send(self, message: Message) -> None:
        """``send`` through the middleware: the response start gets its headers, the rest goes straight on."""
        if message["type"] == "http.response.start":
            self.status = message["status"]
            if self._hook is not None:
                message = self._hook.started(self, message)
        await self.server_send(message)

    def add_response_header(self, name: str, value: str) -> None:
        """Send ``name: value`` with the response start, whichever relay writes it (a protocol's
        prepare step may decide one, e.g. a lowered output limit, before the relay is chosen)."""
        self.response_headers = (*self.response_headers, (name.lower().encode("latin-1"), value.encode("latin-1")))

    @property
    def error_shape(self) -> ErrorShape:
        """How errors are written for this request's route."""
        route = self.route
        if route is not None:
            return route.error_shape
        return self._shapes.for_path(self.scope["path"])

    def detached(self) -> RequestContext:
        """A context for work that outlives this request (a background run): who and which request, no client."""
        copy = RequestContext(self.request_id, principal=self.principal, affinity_key=self.affinity_key,
                              shapes=self._shapes)
        copy.route = self.route
        copy._body, copy._payload = self._body, self._payload
        if self._extensions is not None:  # what was attached travels with it (a token reservation, a span)
            copy._extensions = dict(self._extensions)
        return copy

    # --- what later layers attach ---------------------------------------------------------
    def put(self, value: object) -> None:
        """Attach ``value``, found again by its type (``get(type(value))``)."""
        if self._extensions is None:
            self._extensions = {}
        self._extensions[type(value)] = value

    def get(self, kind: type[T]) -> T | None:
        extensions = self._extensions
        return extensions.get(kind) if extensions is not None else None


def request_context(scope: Scope) -> RequestContext:
    """The context of the request ``scope`` describes (for FastAPI routes, which reach only the scope)."""
    return scope[SCOPE_KEY]


def current_request() -> RequestContext | None:
    """The request being served in this task, if any (for log lines; see the module's docstring)."""
    return current.get()
