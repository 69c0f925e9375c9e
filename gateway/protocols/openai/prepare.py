"""Read just enough of a client's request to route it; forward the rest untouched.

The body is parsed once (orjson) to learn ``model``, ``stream``, ``stream_options`` and the
gateway's own ``session_id``. It is re-serialised only when the gateway must change
something: an alias to resolve, usage to request for a stream, the ``session_id`` to take
out. Every other field, known to the gateway or not, reaches vLLM as the client wrote it.

The same reading fills the routing hints (``engines.routing``): the engine-side model, the
affinity key (the ``session_id``, else the OpenAI ``user``; an ``x-session-affinity`` header
wins over both, see ``http.context``), and, only when the routing policy reads it, the prompt's
prefix. A streamed chat in a resumable session whose run is reproducible also gets its
continuation (``openai.continuation``): how to produce it again if its engine fails.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from gateway.engines.routing import RouteHints, openai_hints
from gateway.engines.state import EngineState
from gateway.http.errors import GatewayError
from gateway.protocols.common.body import check_depth, too_deep
from gateway.protocols.common.sessions import take_session_id
from gateway.protocols.openai.continuation import ChatReplay, continuation_for

CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"
MAX_CHOICES = 128


@dataclass(slots=True)
class PreparedRequest:
    path: str                      # engine path, e.g. /v1/chat/completions
    body: bytes                    # what goes to the engine
    payload: dict = field(repr=False)
    stream: bool = False
    client_wants_usage: bool = False
    session_id: str | None = None  # the client's, if it named one (chat streams only)
    route: RouteHints | None = None  # where the engine layer should send it
    continuation: ChatReplay | None = None  # how to continue the stream on another engine

    @property
    def choices(self) -> int:
        n = self.payload.get("n")
        return n if isinstance(n, int) and not isinstance(n, bool) and 0 < n <= MAX_CHOICES else 1


def parse_body(raw: bytes) -> dict:
    """The request body as a JSON object, or a 400 saying what is wrong with it."""
    if not raw:
        raise GatewayError(400, "request body is empty: expected a JSON object", param="body")
    try:
        payload = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if str(exc).startswith("depth limit exceeded"):
            raise too_deep() from None
        raise GatewayError(400, f"request body is not valid JSON: {exc}", param="body") from exc
    check_depth(raw, payload)  # the gateway may write it again (a model alias, a budget)
    if not isinstance(payload, dict):
        raise GatewayError(400, "request body must be a JSON object", param="body")
    return payload


def prepare(raw: bytes | None, payload: dict, *, path: str, engine: EngineState, resumable: bool) -> PreparedRequest:
    """Validate the fields the gateway reads and build the engine request."""
    changed = raw is None
    stream = payload.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise GatewayError(400, "'stream' must be a boolean", param="stream")

    upstream_model = engine.resolve_model(payload.get("model"))
    if upstream_model is not None:
        payload["model"] = upstream_model
        changed = True

    session_id = None
    if "session_id" in payload:
        changed = True
        if stream is True and path != CHAT_PATH and payload["session_id"] is not None:
            raise GatewayError(400, "'session_id' is only valid for chat completions", param="session_id")
        session_id = take_session_id(payload, stream=stream, resumable=resumable)

    client_wants_usage = False
    if stream:
        options = payload.get("stream_options")
        if options is not None and not isinstance(options, dict):
            raise GatewayError(400, "'stream_options' must be an object", param="stream_options")
        client_wants_usage = bool(options and options.get("include_usage"))
        if not client_wants_usage:
            # The gateway always wants the engine's usage (metrics, per-key
            # accounting); it strips the usage chunk again for this client.
            payload["stream_options"] = {**(options or {}), "include_usage": True}
            changed = True
    elif "stream_options" in payload and payload["stream_options"] is not None:
        raise GatewayError(400, "'stream_options' is only allowed when 'stream' is true", param="stream_options")

    body = orjson.dumps(payload) if changed else raw
    model = payload.get("model")
    route = openai_hints(payload, model=model if isinstance(model, str) else engine.default_model,
                         affinity_key=session_id, with_prefix=engine.wants_prefix)
    continuation = None
    if stream and resumable and path == CHAT_PATH and engine.continues_streams:
        continuation = continuation_for(payload, path=path, body=body)
    return PreparedRequest(path=path, body=body, payload=payload, stream=stream,
                           client_wants_usage=client_wants_usage, session_id=session_id, route=route,
                           continuation=continuation)
