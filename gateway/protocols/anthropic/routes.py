"""Anthropic's Messages API through the gateway: ``POST /v1/messages`` and ``/v1/messages/count_tokens``.

What Anthropic clients (the ``anthropic`` SDKs, Claude Code) send works unchanged: the key
as ``x-api-key`` or ``Authorization: Bearer`` (``http.auth``), any ``anthropic-version`` and
``anthropic-beta`` header (vLLM reads neither; they are not forwarded), a query string such
as ``?beta=true`` (the engine path never carries it). The body is read once for what the
gateway checks itself (``model`` and ``max_tokens`` present and well typed, ``stream`` a
boolean, numbers within 64 bits; what vLLM takes and Anthropic refuses: ``temperature``
outside 0..1), to resolve a model alias and to take out the gateway's own
``session_id``, and a thinking budget the engine cannot count becomes adaptive thinking
(``thinking``), and a failed tool's result says so in words (``tool_errors``); otherwise it
reaches vLLM as written. A tool call the engine gets wrong is a 502 or the stream's ``error``
event (``errors.output_failure``, ``dialect``). A stream goes through the stream backend like
an OpenAI chat stream (``dialect``): with sessions on (``SESSION_STORE``) every
event carries ``id: <session_id>:<index>``, a dropped stream resumes with ``Last-Event-ID``,
``POST /v1/cancel/{session_id}`` stops it, and a greedy one whose engine dies goes on on
another engine (``continuation``); a client that leaves a session nobody named aborts the
engine's generation. Every error leaves in Anthropic's envelope (``errors``).
"""

from __future__ import annotations

import functools

import orjson

from gateway.core import Core
from gateway.engines.errors import EngineHTTPError
from gateway.engines.routing import RouteHints
from gateway.failures import Failure
from gateway.http.body import read_body
from gateway.http.context import RequestContext
from gateway.http.errors import GatewayError
from gateway.http.raw_routes import RawRoute
from gateway.protocols.anthropic import count
from gateway.protocols.anthropic.continuation import continuation_for
from gateway.protocols.anthropic.count import count_past_context, past_context
from gateway.protocols.anthropic.dialect import ANTHROPIC, ANTHROPIC_WITH_TOOLS
from gateway.protocols.anthropic.errors import ANTHROPIC_SHAPE, output_failure
from gateway.protocols.anthropic.thinking import ThinkingBudgets
from gateway.protocols.anthropic.tool_errors import mark_failed_results
from gateway.protocols.common import budget, table
from gateway.protocols.common.body import expect_bool, expect_int, expect_list, expect_str, json_object, read_object
from gateway.protocols.common.sampling import number
from gateway.protocols.common.sessions import asked_resume, take_session_id
from gateway.relay.call import StreamCall
from gateway.relay.unary import relay_json
from gateway.sessions.ids import SESSION_ID_PATTERN, validate_session_id

TAGS = ("Anthropic-compatible",)
MESSAGES_PATH = "/v1/messages"
COUNT_TOKENS_PATH = "/v1/messages/count_tokens"


class AnthropicMessages:
    def __init__(self, core: Core) -> None:
        self.core = core
        self.thinking = ThinkingBudgets()

    async def _prepare(self, payload: dict, raw: bytes, request: RequestContext, *,
                       count_only: bool) -> tuple[bytes, RouteHints, str | None]:
        model = expect_str(payload, "model", required=True)
        messages = expect_list(payload, "messages", required=True)
        session_id = None
        changed = False
        if not count_only:
            expect_int(payload, "max_tokens", required=True, minimum=1)
            stream = expect_bool(payload, "stream")
            _refuse_what_vllm_takes(payload)
            if "session_id" in payload:
                session_id = take_session_id(payload, stream=stream, resumable=self.core.streams.resumable)
                changed = True
        if not messages:  # (vLLM's own refusal names no field: "Cannot apply chat template to an empty conversation")
            raise GatewayError(400, "messages: at least one message is required", param="messages")
        if mark_failed_results(payload, raw):  # is_error, which vLLM drops, in words (tool_errors)
            changed = True
        engine_state = self.core.engine_state
        if not engine_state.served_models:  # never seen the engine yet: look before refusing
            await engine_state.refresh()
        upstream = engine_state.resolve_model(model)
        if upstream is not None:
            payload["model"] = model = upstream
            changed = True
        if not count_only and await budget.fit_payload(count.MESSAGES, payload, body_bytes=len(raw),
                                                       request=request, core=self.core):
            changed = True
        if not count_only and "thinking" in payload:
            ask = functools.partial(self.core.engines.post_json, request=request, route=RouteHints(model=model))
            ignored = await self.thinking.fit(payload, model, ask)
            if ignored is not None:  # (the engine has no reasoning parser: thinking.py)
                request.add_response_header(*ignored)
                changed = True
        body = orjson.dumps(payload) if changed else raw
        metadata = payload.get("metadata")
        user = metadata.get("user_id") if isinstance(metadata, dict) else None
        affinity = session_id or (user if isinstance(user, str) else None)
        return body, RouteHints(model=model, affinity_key=affinity), session_id

    async def messages(self, request: RequestContext) -> None:
        core = self.core
        raw = await read_body(request.receive)
        payload, as_read = read_object(raw)
        resume_from = asked_resume(request)
        if resume_from is not None and core.streams.resumable:
            # The same POST with Last-Event-ID: the rest of the session from its log, no engine needed.
            session_id = payload.get("session_id")
            call = StreamCall(path=MESSAGES_PATH, body=b"", dialect=ANTHROPIC, resume_from=resume_from,
                              session_id=validate_session_id(session_id) if session_id is not None else None)
            response = await core.streams.stream(call, request)
            await response(request.scope, request.receive, request.send)
            return
        body, hints, session_id = await self._prepare(payload, raw, request, count_only=False)
        if as_read or body is not raw:  # (the body orjson reads back as the payload: limits and tracing reuse it)
            request.keep_parsed(body, payload)
        tools = bool(payload.get("tools"))  # (its tool calls are checked: common.tool_calls)
        if payload.get("stream"):
            continuation = None
            if core.streams.resumable and core.engine_state.continues_streams:
                continuation = continuation_for(payload, path=MESSAGES_PATH, body=body)
            call = StreamCall(path=MESSAGES_PATH, body=body, dialect=ANTHROPIC_WITH_TOOLS if tools else ANTHROPIC,
                              model=hints.model, route=hints, session_id=session_id, continuation=continuation)
            response = await core.streams.stream(call, request)
            await response(request.scope, request.receive, request.send)
            return

        async def answered(answer: bytes) -> bytes:
            try:
                message = orjson.loads(answer)
                usage = message.get("usage") or {}
            except (orjson.JSONDecodeError, AttributeError):
                return answer
            core.metrics.count_usage(request.key_id, {"prompt_tokens": usage.get("input_tokens"),
                                                      "completion_tokens": usage.get("output_tokens")})
            return with_stop_sequence(answer, message)

        await relay_json(request, core.relay, "POST", MESSAGES_PATH, body, count_usage=False, route=hints,
                         on_success=answered, on_error=output_failure if tools else None)

    async def count_tokens(self, request: RequestContext) -> None:
        raw = await read_body(request.receive)
        payload = json_object(raw)
        body, hints, _ = await self._prepare(payload, raw, request, count_only=True)

        async def refused(error: EngineHTTPError) -> Failure | bytes:
            """A prompt past the context is counted all the same (``count``); any other refusal stays."""
            if not past_context(error):
                return error
            ask = functools.partial(self.core.engines.post_json, request=request, route=hints)
            return await count_past_context(ask, payload) or error

        await relay_json(request, self.core.relay, "POST", COUNT_TOKENS_PATH, body, count_usage=False, route=hints,
                         on_error=refused)

    def routes(self) -> list[RawRoute]:
        handlers = {("POST", MESSAGES_PATH): self.messages, ("POST", COUNT_TOKENS_PATH): self.count_tokens}
        return table.bind(table.rows("anthropic"), handlers, error_shape=ANTHROPIC_SHAPE, tags=TAGS,
                          extra=lambda row: {"streams": row.path == MESSAGES_PATH,
                                             "request_schema": MESSAGES_SCHEMA if row.path == MESSAGES_PATH
                                             else COUNT_TOKENS_SCHEMA})


TEMPERATURE_RANGE = "temperature: range: 0..1"


def _refuse_what_vllm_takes(payload: dict) -> None:
    """Anthropic's 400 for what vLLM's Messages route accepts: a ``temperature`` outside 0..1 (vLLM
    takes up to 2), in Anthropic's words. (A ``"role": "system"`` message is Anthropic's
    mid-conversation system message, which Claude Code sends: it goes to vLLM, which takes it.)"""
    temperature = payload.get("temperature")
    if number(temperature) and not 0 <= temperature <= 1:
        raise GatewayError(400, TEMPERATURE_RANGE, param="temperature")


def with_stop_sequence(answer: bytes, message: dict) -> bytes:
    """A non-streamed message with its ``stop_sequence``, null unless a stop sequence ended it.

    Anthropic always sends the member; vLLM drops null members from the answer (its streams
    keep it). ``message`` is ``answer`` parsed (the usage count reads it already): the member
    goes first, the rest of the bytes as the engine wrote them, not encoded again.
    """
    if "stop_sequence" in message or not message or answer[:1] != b"{":
        return answer
    return b'{"stop_sequence":null,' + answer[1:]


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
        "temperature": {"type": "number", "minimum": 0, "maximum": 1},
        "tools": {"type": "array", "items": {"type": "object"}},
        "metadata": {"type": "object", "properties": {"user_id": {"type": "string"}}},
        "session_id": {"type": "string", "pattern": SESSION_ID_PATTERN,
                       "description": "the gateway's: names a resumable session (streams only)"},
    },
}
COUNT_TOKENS_SCHEMA = {
    "type": "object",
    "required": ["model", "messages"],
    "additionalProperties": True,
    "properties": {"model": {"type": "string"}, "messages": {"type": "array", "items": {"type": "object"}},
                   "system": {"oneOf": [{"type": "string"}, {"type": "array"}]}},
}
