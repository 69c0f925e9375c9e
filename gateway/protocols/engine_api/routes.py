"""vLLM's other routes through the gateway: the relayed ones, the few an admin key may reach, the refused rest.

- Relayed (embeddings, tokenize/detokenize, rerank, score, pooling, classify, audio): the
  body is read once to resolve ``model`` (an alias becomes the served name; an unknown model
  is a 404 listing the valid ones) and is otherwise forwarded as written; the answer is
  relayed as the engine gave it, usage counted per key, the engine's request aborted if the
  client leaves. A route the engine does not serve for the model it runs (embeddings on a
  generative model) answers the engine's own 404, in the OpenAI envelope.
- Admin (``ENGINE_ADMIN_ROUTES``): relayed for an admin key only (403 for any other key), with
  the query flags vLLM reads there (``reset_running_requests``, ``reset_external``).
- Refused: every other operational route of the engine answers 404, with any key, for any
  method (FastAPI routes kept out of the OpenAPI document).
"""

from __future__ import annotations

import dataclasses

import orjson
from fastapi import APIRouter, Request
from starlette.datastructures import Headers, QueryParams

from gateway.core import Core
from gateway.engines.errors import EngineHTTPError
from gateway.engines.routing import RouteHints
from gateway.http.body import read_body
from gateway.http.context import RequestContext
from gateway.http.errors import OPENAI_SHAPE, ErrorShape, ErrorShapes, GatewayError
from gateway.http.raw_routes import RawRoute
from gateway.protocols.common import table
from gateway.protocols.common.body import expect_str, read_object
from gateway.protocols.engine_api import multipart
from gateway.relay.unary import relay_json

TAGS = ("vLLM engine API",)
MULTIPART_PATHS = frozenset({"/v1/audio/transcriptions", "/v1/audio/translations"})
ANY_METHOD = ["GET", "POST", "PUT", "PATCH", "DELETE"]


def _explained_404(explanation: str):
    """The OpenAI envelope; the engine's bare route 404 ({"detail": "Not Found"}) gets ``explanation``."""

    def body(error: GatewayError) -> bytes:
        refusal = error.__cause__
        if isinstance(refusal, EngineHTTPError) and refusal.upstream_status == 404 and error.message == "Not Found":
            error = GatewayError(404, f"Not Found: {explanation}", code="route_not_served")
        return orjson.dumps(error.envelope())

    return body


ENGINE_SHAPE = ErrorShape("openai", _explained_404(
    "the engine does not serve this route for the model it runs (pooling, scoring and audio routes exist only "
    "on models of those kinds)"), validation_is_400=True)
ADMIN_SHAPE = ErrorShape("openai", _explained_404(
    "the engine does not serve this operational route (vLLM mounts it only in its dev mode, "
    "VLLM_SERVER_DEV_MODE=1, or for LoRA with VLLM_ALLOW_RUNTIME_LORA_UPDATING=1)"), validation_is_400=True)


# The query parameters vLLM's admin routes read (all booleans): relayed in one canonical form, so
# the engine client's per-URL cache stays bounded whatever a caller sends.
ADMIN_QUERY_FLAGS = ("reset_running_requests", "reset_external")


def _admin_query(params) -> str:
    flags = []
    for name in ADMIN_QUERY_FLAGS:
        value = params.get(name)
        if value is None:
            continue
        if value.lower() not in ("true", "false", "1", "0"):
            raise GatewayError(400, f"'{name}' must be true or false", param=name)
        flags.append(f"{name}={'true' if value.lower() in ('true', '1') else 'false'}")
    return "?" + "&".join(flags) if flags else ""


class EngineAPI:
    def __init__(self, core: Core) -> None:
        self.core = core
        self.admin_paths = frozenset(core.settings.engine_admin_routes)

    async def relay(self, request: RequestContext) -> None:
        """Serve one POST to a relayed route (its path is the engine's)."""
        path = request.route.path
        raw = await read_body(request.receive)
        engine_state = self.core.engine_state
        if not engine_state.served_models:  # never seen the engine yet: look before refusing
            await engine_state.refresh()
        content_type = None
        if path in MULTIPART_PATHS:
            content_type = Headers(scope=request.scope).get("content-type", "")
            body, model = multipart.with_model(raw, content_type, engine_state.resolve_model)
        else:
            payload, as_read = read_object(raw)
            model = expect_str(payload, "model")
            upstream = engine_state.resolve_model(model)
            body = raw
            if upstream is not None:
                payload["model"] = model = upstream
                body = orjson.dumps(payload)
            if as_read or body is not raw:  # (limits and tracing reuse the parse)
                request.keep_parsed(body, payload)
        hints = RouteHints(model=model or engine_state.default_model)
        await relay_json(request, self.core.relay, "POST", path, body, route=hints, content_type=content_type)

    async def admin(self, request: RequestContext) -> None:
        """An operational route for an admin key: relayed with its query string."""
        principal = request.principal
        if principal is None or not principal.can_write:
            raise GatewayError(403, f"{request.scope['path']} needs an admin key (ADMIN_API_KEYS)",
                               code="insufficient_permissions")
        raw = await read_body(request.receive)
        target = request.route.path + _admin_query(QueryParams(request.scope["query_string"]))
        await relay_json(request, self.core.relay, "POST", target, raw or None, count_usage=False,
                         route=RouteHints(model=self.core.engine_state.default_model))

    def routes(self) -> list[RawRoute]:
        relayed = table.rows("engine_api", table.RELAYED)
        admin = [row for row in table.rows("engine_api", table.ADMIN) if row.path in self.admin_paths]
        handlers = {(row.method, row.path): self.relay for row in relayed}
        handlers.update({(row.method, row.path): self.admin for row in admin})
        relayed_routes = [dataclasses.replace(route, multipart=route.path in MULTIPART_PATHS)
                          for route in table.bind(relayed, handlers, error_shape=ENGINE_SHAPE, tags=TAGS)]
        return (relayed_routes
                + table.bind(admin, handlers, error_shape=ADMIN_SHAPE, tags=("vLLM engine admin",)))

    def refused_paths(self) -> list[str]:
        """Every engine path the gateway never relays: the refused rows, and admin rows not enabled."""
        return [row.path for row in table.ROUTES
                if row.kind == table.REFUSED or (row.kind == table.ADMIN and row.path not in self.admin_paths)]

    def refusals(self, shapes: ErrorShapes) -> APIRouter:
        """404 for every refused path, any method, in the OpenAI envelope; kept out of the OpenAPI document."""
        router = APIRouter(include_in_schema=False)

        async def refuse(request: Request) -> None:
            raise GatewayError(404, f"{request.url.path} is one of the engine's operational routes, which this "
                                    "gateway does not expose", code="route_not_exposed")

        for path in self.refused_paths():
            router.add_api_route(path, refuse, methods=ANY_METHOD, include_in_schema=False)
            if "{" in path:
                shapes.register_prefix(path[:path.index("{")], OPENAI_SHAPE)
            else:
                shapes.register(path, OPENAI_SHAPE)
        return router
