"""Thin routes: parse just enough, then hand the request to the relay."""

from __future__ import annotations

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from gateway.auth import PrincipalDep
from gateway.openai.prepare import parse_body, prepare
from gateway.openai.relay import PlainStreamResponse, RelayJSONResponse
from gateway.openai.streaming import relay_context, start_chat_stream

router = APIRouter(tags=["OpenAI-compatible"])


async def relay_request(request: Request, principal, path: str) -> Response:
    """The response for an OpenAI POST to ``path``: a relay (plain or through a session)."""
    raw = await request.body()
    state = request.app.state
    if not state.engine.served_models:  # never seen the engine yet: look before refusing
        await state.engine.refresh()
    prepared = prepare(
        raw,
        parse_body(raw),
        path=path,
        engine=state.engine,
        sessions_enabled=getattr(state, "sessions", None) is not None,
    )
    if not prepared.stream:
        return RelayJSONResponse(prepared, relay_context(request, principal))
    if path == "/v1/chat/completions":
        return await start_chat_stream(request, prepared, principal=principal)
    return PlainStreamResponse(prepared, relay_context(request, principal))


@router.post("/v1/chat/completions", summary="Create a chat completion (relayed to vLLM)")
async def chat_completions(request: Request, principal: PrincipalDep) -> Response:
    return await relay_request(request, principal, "/v1/chat/completions")


@router.post("/v1/completions", summary="Create a completion (relayed to vLLM)")
async def completions(request: Request, principal: PrincipalDep) -> Response:
    return await relay_request(request, principal, "/v1/completions")


@router.get("/v1/models", summary="List the served model and its aliases")
async def list_models(request: Request, principal: PrincipalDep) -> Response:
    engine = request.app.state.engine
    upstream = request.app.state.upstream
    listing = await upstream.get_json("/v1/models")
    cards = [card for card in listing.get("data", []) if isinstance(card, dict)]
    known = {card.get("id") for card in cards}
    template = next(iter(cards), {"object": "model", "owned_by": "vllm"})
    for name in engine.public_models:
        if name not in known:
            cards.append({**template, "id": name, "parent": engine.default_model})
    return Response(
        orjson.dumps({"object": "list", "data": cards}), media_type="application/json"
    )
