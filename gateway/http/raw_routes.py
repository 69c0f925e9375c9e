"""Routes served as raw ASGI, below FastAPI's router, declared once and documented from that declaration.

Profiling showed FastAPI's routing, dependency solving and per-request exit stack costing
about a third of the gateway's CPU on a relayed request. The hot relay routes are therefore
declared as :class:`RawRoute` values in their protocol's route table; from that one
declaration

- :class:`RawRouter` serves them (a dict lookup on method and path, a short list of
  templated paths), after the gateway middleware has authenticated and admitted the request;
- :func:`document_raw_routes` adds them to the OpenAPI document, so ``/docs`` shows exactly
  what is served, and nothing is registered twice.

A raw handler is ``async (request) -> None``, given the request's context
(``http.context.RequestContext``: its principal, the route, template parameters in
``path_params``, how to read the body and answer). Errors it raises (before starting its
response) leave in the route's error shape, never as a bare 500.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi.routing import APIRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.failures import Failure
from gateway.http.admission import CONTROL_EXTRA, ControlRequests
from gateway.http.context import SCOPE_KEY, RequestContext
from gateway.http.errors import ErrorShape, ErrorShapes, GatewayError, send_error

log = logging.getLogger("gateway.routes")

RawHandler = Callable[[RequestContext], Awaitable[None]]
_PARAM = re.compile(r"{([a-zA-Z_][a-zA-Z0-9_]*)}")


@dataclass(frozen=True)
class RawRoute:
    method: str
    path: str                      # a template: /v1/responses/{response_id}
    handler: RawHandler
    summary: str
    error_shape: ErrorShape
    tags: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()  # more paths served the same way (e.g. /completions for /v1/completions)
    description: str = ""
    request_schema: dict[str, Any] | None = None  # OpenAPI schema of a JSON body, for /docs only
    streams: bool = False          # may answer text/event-stream
    control: bool = False          # a control request: admitted in its own pool (gateway.http.admission)
    multipart: bool = False        # takes multipart/form-data (every other route: JSON; http.browser_guards)

    @property
    def paths(self) -> tuple[str, ...]:
        return (self.path, *self.aliases)


class RawRouter:
    """Dispatch raw routes; everything else goes on to ``app`` (FastAPI's own stack)."""

    def __init__(self, app: ASGIApp, routes: list[RawRoute]) -> None:
        self.app = app
        self.routes = list(routes)
        self._exact: dict[tuple[str, str], RawRoute] = {}
        self._templated: list[tuple[re.Pattern, RawRoute]] = []
        self._methods: dict[str, set[str]] = {}  # exact path -> methods, for 405
        for route in routes:
            for path in route.paths:
                if _PARAM.search(path):
                    self._templated.append((_compile(path), route))
                else:
                    if (route.method, path) in self._exact:
                        raise ValueError(f"raw route {route.method} {path} declared twice")
                    self._exact[(route.method, path)] = route
                    self._methods.setdefault(path, set()).add(route.method)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and SCOPE_KEY in scope:
            await self.dispatch(scope[SCOPE_KEY])
            return
        await self.app(scope, receive, send)

    async def dispatch(self, request: RequestContext) -> None:
        """Serve ``request`` (its context, from the gateway middleware)."""
        scope = request.scope
        method, path = scope["method"], scope["path"]
        route = self._exact.get((method, path))
        if route is None and self._templated:
            route = self._match(request, method, path)
        if route is not None:
            # Served here rather than in a helper coroutine: every coroutine in the chain
            # is resumed each time the request waits on the engine.
            # A raw handler raises only before it starts its response (after that, errors are
            # in-band: an SSE error event); so an exception here can always become an answer.
            request.route = route
            try:
                await route.handler(request)
            except Failure as error:
                await send_error(route.error_shape, error, request.send)
            except Exception:
                log.exception("unhandled error", extra={"path": path})
                await send_error(route.error_shape, GatewayError(500, "internal error in the gateway"), request.send)
            return
        allowed = self._methods.get(path)
        if allowed is not None and method not in allowed:
            route = next(r for r in self.routes if path in r.paths)
            error = GatewayError(405, f"method {method} is not allowed on {path}",
                                 headers={"allow": ", ".join(sorted(allowed))})
            await send_error(route.error_shape, error, request.send)
            return
        await self.app(scope, request.receive, request.send)

    def _match(self, request: RequestContext, method: str, path: str) -> RawRoute | None:
        for pattern, route in self._templated:
            if route.method != method:
                continue
            found = pattern.fullmatch(path)
            if found is not None:
                request.path_params = found.groupdict()
                return route
        return None


def control_requests(raw_routes: list[RawRoute], routes: list[Any]) -> ControlRequests:
    """The control requests among the raw routes (``control``) and FastAPI's (``openapi_extra=CONTROL_EXTRA``)."""
    pairs = [(route.method, path) for route in raw_routes if route.control for path in route.paths]
    for route in routes:
        if isinstance(route, APIRoute) and (route.openapi_extra or {}).items() >= CONTROL_EXTRA.items():
            pairs += [(method, route.path) for method in route.methods]
    return ControlRequests(pairs)


# A FastAPI route whose body is multipart/form-data says so in its OpenAPI entry (``openapi_extra``).
MULTIPART_EXTRA = {"requestBody": {"content": {"multipart/form-data": {"schema": {"type": "object"}}}}}


def multipart_paths(raw_routes: list[RawRoute], routers: list[Any]) -> frozenset[str]:
    """The paths that take multipart bodies: raw routes marked ``multipart``, FastAPI's with ``MULTIPART_EXTRA``."""
    paths = {path for route in raw_routes if route.multipart for path in route.paths}
    for router in routers:
        for route in router.routes:
            if isinstance(route, APIRoute) and "multipart/form-data" in (
                    (route.openapi_extra or {}).get("requestBody", {}).get("content", {})):
                paths.add(route.path)
    return frozenset(paths)


def register_shapes(shapes: ErrorShapes, routes: list[RawRoute]) -> None:
    """Make every declared path's errors, refusals included, leave in its route's shape."""
    for route in routes:
        for path in route.paths:
            if _PARAM.search(path):
                shapes.register_prefix(path[:path.index("{")], route.error_shape)
            else:
                shapes.register(path, route.error_shape)


def _compile(template: str) -> re.Pattern:
    pattern = ""
    position = 0
    for found in _PARAM.finditer(template):
        pattern += re.escape(template[position:found.start()]) + f"(?P<{found.group(1)}>[^/]+)"
        position = found.end()
    return re.compile(pattern + re.escape(template[position:]))


def document_raw_routes(schema: dict, routes: list[RawRoute]) -> dict:
    """Add every raw route (and its aliases) to an OpenAPI document built by FastAPI."""
    paths = schema.setdefault("paths", {})
    for route in routes:
        for path in route.paths:
            operation: dict[str, Any] = {
                "summary": route.summary,
                "operationId": f"{route.method.lower()}_{re.sub(r'[^a-zA-Z0-9]+', '_', path).strip('_')}",
                "tags": list(route.tags),
                "responses": _responses(route),
            }
            if route.description:
                operation["description"] = route.description
            if route.control:
                operation.update(CONTROL_EXTRA)
            if path != route.path:
                operation["description"] = (operation.get("description", "") + f"\n\nSame as {route.path}.").strip()
            parameters = [{"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
                          for name in _PARAM.findall(path)]
            if parameters:
                operation["parameters"] = parameters
            if route.request_schema is not None:
                operation["requestBody"] = {"required": True,
                                            "content": {"application/json": {"schema": route.request_schema}}}
            paths.setdefault(path, {})[route.method.lower()] = operation
    return schema


def _responses(route: RawRoute) -> dict:
    content: dict[str, Any] = {"application/json": {"schema": {"type": "object"}}}
    if route.streams:
        content["text/event-stream"] = {"schema": {"type": "string"}}
    return {"200": {"description": "The engine's answer, relayed", "content": content},
            "default": {"description": f"An error in the {route.error_shape.name} shape",
                        "content": {"application/json": {"schema": {"type": "object"}}}}}
