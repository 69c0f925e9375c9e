"""Anthropic's paths beyond the two it serves: their errors in Anthropic's envelope, and the doubled ``/v1``.

Every path under ``/v1/messages`` (a batch route, a typo) is Anthropic's family: its errors
leave in Anthropic's envelope, which Anthropic's SDKs and Claude Code parse, not OpenAI's.

Anthropic's clients add ``/v1/messages`` to their base URL themselves, so a base URL set to
``http://host:8000/v1`` (as OpenAI's clients want it) sends them to ``/v1/v1/messages``. The
gateway does not serve that path as if nothing were wrong: it answers a 404 in Anthropic's
envelope that says what to change (Claude Code shows it; the plain "not found" it showed
before read as a problem with the model). Accepting the doubled path would hide a setting that
is wrong for every other Anthropic route (``count_tokens``) and every other gateway.
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from gateway.http.errors import ErrorShapes, GatewayError
from gateway.protocols.anthropic.errors import ANTHROPIC_SHAPE

FAMILY_PREFIX = "/v1/messages"
DOUBLED_PREFIX = "/v1/v1/messages"
DOUBLED_PATHS = ("/v1/v1/messages", "/v1/v1/messages/count_tokens")
ANY_METHOD = ["GET", "POST", "PUT", "PATCH", "DELETE"]


def doubled_v1_message(path: str) -> str:
    return (f"{path} does not exist: the base URL your client was given ends in /v1, and Anthropic's clients "
            "add /v1 themselves. Set it to the gateway's address without /v1 "
            "(e.g. ANTHROPIC_BASE_URL=http://127.0.0.1:8000).")


def anthropic_paths(shapes: ErrorShapes) -> APIRouter:
    """Anthropic's error shape for its whole path family, and the doubled-``/v1`` 404 (not in the OpenAPI document)."""
    shapes.register_prefix(FAMILY_PREFIX, ANTHROPIC_SHAPE)
    shapes.register_prefix(DOUBLED_PREFIX, ANTHROPIC_SHAPE)
    router = APIRouter(include_in_schema=False)

    async def doubled(request: Request) -> None:
        raise GatewayError(404, doubled_v1_message(request.url.path), code="base_url_ends_in_v1")

    for path in DOUBLED_PATHS:
        router.add_api_route(path, doubled, methods=ANY_METHOD, include_in_schema=False)
    return router
