"""Anthropic's Messages API through the gateway: ``POST /v1/messages`` and ``/v1/messages/count_tokens``.

What Anthropic clients (the ``anthropic`` SDKs, Claude Code) send works unchanged: the key
as ``x-api-key`` or ``Authorization: Bearer`` (``http.auth``), any ``anthropic-version`` and
``anthropic-beta`` header (vLLM reads neither; they are not forwarded), a query string such
as ``?beta=true`` (the engine path never carries it). The body is read once for what the
gateway checks itself (``model`` and ``max_tokens`` present and well typed, ``stream`` a
boolean, numbers within 64 bits) and to resolve a model alias; otherwise it reaches vLLM as
written. Streams are relayed event by event (``dialect``), plainly: a client that leaves
aborts the engine's generation. Every error leaves in Anthropic's envelope (``errors``).
"""

from __future__ import annotations

import orjson
from starlette.types import Receive, Scope, Send

from gateway.core import Core
from gateway.engines.routing import RouteHints
from gateway.http.body import read_body
from gateway.http.raw_routes import RawRoute
from gateway.protocols.anthropic.dialect import ANTHROPIC
from gateway.protocols.anthropic.errors import ANTHROPIC_SHAPE
from gateway.protocols.common import table
from gateway.protocols.common.body import expect_bool, expect_int, expect_list, expect_str, json_object
from gateway.relay.context import StreamCall
from gateway.relay.plain import PlainStreamResponse
from gateway.relay.unary import RelayJSONResponse

TAGS = ("Anthropic-compatible",)
MESSAGES_PATH = "/v1/messages"
COUNT_TOKENS_PATH = "/v1/messages/count_tokens"


class AnthropicMessages:
    def __init__(self, core: Core) -> None:
        self.core = core

    async def _prepare(self, scope: Scope, receive: Receive, *, count_only: bool) -> tuple[dict, bytes, RouteHints]:
        raw = await read_body(receive)
        payload = json_object(raw)
        model = expect_str(payload, "model", required=True)
        expect_list(payload, "messages", required=True)
        if not count_only:
            expect_int(payload, "max_tokens", required=True, minimum=1)
            expect_bool(payload, "stream")
        engine_state = self.core.engine_state
        if not engine_state.served_models:  # never seen the engine yet: look before refusing
            await engine_state.refresh()
        upstream = engine_state.resolve_model(model)
        body = raw
        if upstream is not None:
            payload["model"] = model = upstream
            body = orjson.dumps(payload)
        metadata = payload.get("metadata")
        user = metadata.get("user_id") if isinstance(metadata, dict) else None
        return payload, body, RouteHints(model=model, affinity_key=user if isinstance(user, str) else None)

    async def messages(self, scope: Scope, receive: Receive, send: Send) -> None:
        payload, body, hints = await self._prepare(scope, receive, count_only=False)
        ctx = self.core.relay_context(scope, error_shape=ANTHROPIC_SHAPE)
        if payload.get("stream"):
            call = StreamCall(path=MESSAGES_PATH, body=body, dialect=ANTHROPIC, model=hints.model, route=hints)
            await PlainStreamResponse(call, ctx)(scope, receive, send)
            return

        async def count_usage(answer: bytes) -> bytes:
            try:
                usage = orjson.loads(answer).get("usage") or {}
            except (orjson.JSONDecodeError, AttributeError):
                return answer
            ctx.metrics.count_usage(ctx.key_id, {"prompt_tokens": usage.get("input_tokens"),
                                                 "completion_tokens": usage.get("output_tokens")})
            return answer

        await RelayJSONResponse("POST", MESSAGES_PATH, body, ctx, count_usage=False, route=hints,
                                on_success=count_usage)(scope, receive, send)

    async def count_tokens(self, scope: Scope, receive: Receive, send: Send) -> None:
        _, body, hints = await self._prepare(scope, receive, count_only=True)
        ctx = self.core.relay_context(scope, error_shape=ANTHROPIC_SHAPE)
        await RelayJSONResponse("POST", COUNT_TOKENS_PATH, body, ctx, count_usage=False,
                                route=hints)(scope, receive, send)

    def routes(self) -> list[RawRoute]:
        handlers = {("POST", MESSAGES_PATH): self.messages, ("POST", COUNT_TOKENS_PATH): self.count_tokens}
        return table.bind(table.rows("anthropic"), handlers, error_shape=ANTHROPIC_SHAPE, tags=TAGS,
                          extra=lambda row: {"streams": row.path == MESSAGES_PATH,
                                             "request_schema": MESSAGES_SCHEMA if row.path == MESSAGES_PATH
                                             else COUNT_TOKENS_SCHEMA})


MESSAGES_SCHEMA = {
    "type": "object",
    "required": ["model", "max_tokens", "messages"],
    "additionalProperties": True,
    "description": "Anthropic's Messages request; every field vLLM accepts passes through unchanged.",
    "properties": {
        "model": {"type": "string", "description": "a served model or one of its aliases"},
        "max_tokens": {"type": "integer", "minimum": 1},
        "messages": {"type": "array", "items": {"type": "object"}},
        "system": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "object"}}]},
        "stream": {"type": "boolean", "default": False},
        "temperature": {"type": "number", "minimum": 0},
        "tools": {"type": "array", "items": {"type": "object"}},
        "metadata": {"type": "object", "properties": {"user_id": {"type": "string"}}},
    },
}
COUNT_TOKENS_SCHEMA = {
    "type": "object",
    "required": ["model", "messages"],
    "additionalProperties": True,
    "properties": {"model": {"type": "string"}, "messages": {"type": "array", "items": {"type": "object"}},
                   "system": {"oneOf": [{"type": "string"}, {"type": "array"}]}},
}
