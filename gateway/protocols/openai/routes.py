"""The OpenAI-compatible routes: one table, served as raw ASGI, documented from the same declarations.

- ``POST /v1/chat/completions`` and ``POST /v1/completions``: relayed to the engine as the
  client wrote them (``prepare``), answered in one piece or streamed (chat streams through
  the stream backend: resumable sessions when ``SESSION_STORE`` is on; completion streams
  are always relayed plainly).
- ``GET /v1/models``: the engine's models plus the configured aliases; ``GET /v1/models/{model}``
  one of them (vLLM itself has no such route, so the SDK's ``models.retrieve`` needs it). An
  engine that does not answer within ``MODELS_WAIT_SECONDS`` (frozen, swamped) does not hold the
  route for ``UPSTREAM_FIRST_BYTE_TIMEOUT``: the list is then the one the gateway's last look
  at its engines read (``engines.state``). Both answers read as OpenAI's and as Anthropic's
  (``anthropic.models.list()`` and ``retrieve`` call the same paths): each card also has
  Anthropic's ``type``, ``display_name`` and ``created_at``, the list Anthropic's ``has_more``,
  ``first_id`` and ``last_id`` (:func:`both_shapes`); each SDK ignores the other's fields.

Each also answers without ``/v1`` (``/chat/completions``, ...): the paths come from the
engine-API table (``protocols.common.table``).

A streamed chat completion, step by step: the gateway middleware authenticates, admits and
times the request and makes its context (``http.middleware``, ``http.context``); ``RawRouter``
calls :meth:`OpenAIRelay.relay` with it; ``prepare`` resolves the model and asks the engine
for usage; the stream backend (``relay.plain``, or ``sessions.manager`` with the session's log
as the sink) hands the call to the runner (``relay.run``), which opens the engine stream
(the client watched meanwhile) and runs the relay's loop (``relay.pump``) with the OpenAI
dialect (``dialect``: usage tracked and stripped); the client's channel (``relay.channel``)
keeps it alive and notices a disconnect; with sessions every event is framed with its id and
logged for resume on the way.
"""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
from starlette.responses import Response
from starlette.types import Scope

from gateway.core import Core
from gateway.engines.errors import EngineTimeout
from gateway.failures import Unavailable
from gateway.http.body import read_body
from gateway.http.context import RequestContext, request_context
from gateway.http.errors import OPENAI_SHAPE, GatewayError
from gateway.http.listing import list_json
from gateway.http.raw_routes import RawRoute
from gateway.protocols.common import budget, table
from gateway.protocols.common.sessions import asked_resume
from gateway.protocols.openai import reasoning
from gateway.protocols.openai.dialect import OPENAI
from gateway.protocols.openai.forced_tools import FORCED_CALL, check_answer, forces_a_call
from gateway.protocols.openai.prepare import CHAT_PATH, COMPLETIONS_PATH, PreparedRequest, parse_body, prepare
from gateway.relay.call import CompletionHook, StreamCall
from gateway.relay.metering import visible_cards
from gateway.relay.plain import plain_stream
from gateway.relay.unary import relay_json
from gateway.sessions.ids import SESSION_ID_PATTERN, validate_session_id

TAGS = ("OpenAI-compatible",)
JSON = [(b"content-type", b"application/json")]
# vLLM answers /v1/models in milliseconds, even while it generates; an engine that takes longer
# is stalled, and the model list is metadata the gateway already holds.
MODELS_WAIT_SECONDS = 2.0


class OpenAIRelay:
    """The OpenAI protocol over the core: requests in, relay or stream backend out."""

    def __init__(self, core: Core) -> None:
        self.core = core

    async def relay(self, request: RequestContext) -> None:
        """Serve one POST to a completions route (the route's path is the engine's)."""
        core = self.core
        raw = await read_body(request.receive)
        path = request.route.path
        payload = parse_body(raw)
        scope = request.scope
        resume_from = asked_resume(request) if path == CHAT_PATH else None
        response: Response
        if resume_from is not None and core.streams.resumable:
            # The same POST with Last-Event-ID: a replay from the session's log, no engine needed.
            session_id = payload.get("session_id")
            call = StreamCall(path=path, body=b"", dialect=OPENAI, resume_from=resume_from,
                              session_id=validate_session_id(session_id) if session_id is not None else None)
            response = await core.streams.stream(call, request)
            await response(scope, request.receive, request.send)
            return
        engine_state = core.engine_state
        if not engine_state.served_models:  # never seen the engine yet: look before refusing
            await engine_state.refresh()
        if await budget.fit_payload(budget.CHAT if path == CHAT_PATH else budget.COMPLETIONS, payload,
                                    body_bytes=len(raw), request=request, core=core):
            raw = None  # prepare writes the body again
        prepared = prepare(raw, payload, path=path, engine=engine_state, resumable=core.streams.resumable)
        request.keep_parsed(prepared.body, prepared.payload)  # limits and tracing read it, not parse it again
        if not prepared.stream:
            on_success = reasoning.answer if path == CHAT_PATH else None
            if path == CHAT_PATH and forces_a_call(prepared.payload):
                async def on_success(answer: bytes) -> bytes:
                    return await reasoning.answer(await check_answer(answer))
            await relay_json(request, core.relay, "POST", prepared.path, prepared.body, route=prepared.route,
                             on_success=on_success)
            return
        if path == CHAT_PATH:
            response = await core.streams.stream(self.stream_call(prepared), request)
        else:
            response = plain_stream(self.stream_call(prepared), request, core.relay)
        await response(scope, request.receive, request.send)

    def stream_call(self, prepared: PreparedRequest, *, on_complete: CompletionHook | None = None) -> StreamCall:
        forced = prepared.path == CHAT_PATH and forces_a_call(prepared.payload)
        return StreamCall(path=prepared.path, body=prepared.body, dialect=FORCED_CALL if forced else OPENAI,
                          relay_usage=prepared.client_wants_usage, session_id=prepared.session_id,
                          choices=prepared.choices,
                          model=prepared.payload.get("model") or self.core.engine_state.default_model,
                          on_complete=on_complete, route=prepared.route, continuation=prepared.continuation)

    async def stream_chat_completion(self, scope: Scope, payload: dict, *, session_id: str | None = None,
                                     on_complete: CompletionHook | None = None,
                                     resume_from: str | None = None) -> Response:
        """A streamed chat completion of ``payload`` (an OpenAI request body a feature built); with
        ``resume_from`` (a ``Last-Event-ID``) session ``session_id``'s stream resumed from its log instead."""
        if resume_from is not None:
            call = StreamCall(path=CHAT_PATH, body=b"", dialect=OPENAI, resume_from=resume_from,
                              session_id=session_id)
            return await self.core.streams.stream(call, request_context(scope))
        payload = {**payload, "stream": True}
        if session_id is not None:
            payload["session_id"] = session_id
        prepared = prepare(None, payload, path=CHAT_PATH, engine=self.core.engine_state,
                           resumable=self.core.streams.resumable)
        return await self.core.streams.stream(self.stream_call(prepared, on_complete=on_complete),
                                              request_context(scope))

    async def _cards(self) -> list[dict]:
        engine_state = self.core.engine_state
        try:
            listing = await self.core.engines.get_json("/v1/models", timeout=MODELS_WAIT_SECONDS)
        except EngineTimeout:
            known = _known_cards(engine_state.engines)
            if not known:
                raise
            listing = {"data": known}
        cards = [card for card in listing.get("data", []) if isinstance(card, dict)]
        known = {card.get("id") for card in cards}
        template = next(iter(cards), {"object": "model", "owned_by": "vllm"})
        for name in engine_state.public_models:
            if name not in known:
                cards.append({**template, "id": name, "parent": engine_state.default_model})
        return [both_shapes(card) for card in cards]

    async def models(self, request: RequestContext) -> None:
        cards = visible_cards(self.core.relay.meter, request.principal, await self._cards())  # a key's models
        body = orjson.dumps(list_json(cards, has_more=False))  # (OpenAI's list and Anthropic's page: one)
        await request.send({"type": "http.response.start", "status": 200, "headers": JSON})
        await request.send({"type": "http.response.body", "body": body})

    async def model(self, request: RequestContext) -> None:
        wanted = request.path_params["model"]
        cards = visible_cards(self.core.relay.meter, request.principal, await self._cards())
        card = next((card for card in cards if card.get("id") == wanted), None)
        if card is None and visible_cards(self.core.relay.meter, request.principal, [{"id": wanted}]) and any(
                wanted in engine.models for engine in self.core.engine_state.engines):
            # Known, but every engine serving it is down: what a request for it answers (not "does not exist").
            raise Unavailable(f"every inference engine serving '{wanted}' is down", code="engine_unavailable")
        if card is None:
            valid = ", ".join(str(card.get("id")) for card in cards)
            raise GatewayError(404, f"The model '{wanted}' does not exist. Available models: {valid}",
                               param="model", code="model_not_found")
        await request.send({"type": "http.response.start", "status": 200, "headers": JSON})
        await request.send({"type": "http.response.body", "body": orjson.dumps(card)})

    def routes(self) -> list[RawRoute]:
        handlers = {("POST", CHAT_PATH): self.relay, ("POST", COMPLETIONS_PATH): self.relay,
                    ("GET", "/v1/models"): self.models, ("GET", "/v1/models/{model}"): self.model}
        schemas = {CHAT_PATH: CHAT_SCHEMA, COMPLETIONS_PATH: COMPLETION_SCHEMA}
        return table.bind(table.rows("openai"), handlers, error_shape=OPENAI_SHAPE, tags=TAGS,
                          extra=lambda row: {"streams": row.path in schemas,
                                             "request_schema": schemas.get(row.path)})


_COMMON = {
    "model": {"type": "string", "description": "a served model or one of its aliases"},
    "stream": {"type": "boolean", "default": False},
    "stream_options": {"type": "object", "properties": {"include_usage": {"type": "boolean"}}},
    "max_tokens": {"type": "integer", "minimum": 1},
    "temperature": {"type": "number", "minimum": 0},
    "top_p": {"type": "number"},
    "n": {"type": "integer", "minimum": 1},
    "seed": {"type": "integer"},
    "stop": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
}
CHAT_SCHEMA = {
    "type": "object",
    "required": ["messages"],
    "additionalProperties": True,
    "description": "OpenAI's chat completion request; every field vLLM accepts passes through unchanged.",
    "properties": {
        **_COMMON,
        "messages": {"type": "array", "items": {"type": "object"}},
        "session_id": {"type": "string", "pattern": SESSION_ID_PATTERN,
                       "description": "the gateway's: names a resumable session (chat streams only)"},
        "tools": {"type": "array", "items": {"type": "object"}},
        "response_format": {"type": "object"},
    },
}
COMPLETION_SCHEMA = {
    "type": "object",
    "required": ["prompt"],
    "additionalProperties": True,
    "description": "OpenAI's completion request; every field vLLM accepts passes through unchanged.",
    "properties": {**_COMMON, "prompt": {"oneOf": [{"type": "string"}, {"type": "array"}]}},
}


def both_shapes(card: dict) -> dict:
    """A model card (OpenAI's: ``id``, ``object``, ``created``, ``owned_by``) with Anthropic's fields
    too: ``type: "model"``, ``display_name`` (the id: vLLM has no other name) and ``created_at``
    (RFC 3339 of ``created``, in UTC)."""
    created = card.get("created")
    when = (datetime.fromtimestamp(created, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            if isinstance(created, int) and not isinstance(created, bool) and 0 <= created < 253402300800 else None)
    return {**card, "type": "model", "display_name": card.get("id"), "created_at": when}


def _known_cards(engines) -> list[dict]:
    """The model cards the last look at each engine read (ready engines first), each name once."""
    cards: list[dict] = []
    seen: set[object] = set()
    for engine in sorted(engines, key=lambda engine: not engine.ready):
        for card in engine.cards:
            if card.get("id") not in seen:
                seen.add(card.get("id"))
                cards.append(card)
    return cards
