"""The one entry point for streamed chat completions, used by /v1 and by /api/chat.

With resumable sessions enabled (``SESSION_STORE`` != off) the stream goes
through the session manager on ``app.state.sessions`` (ids on every event,
replay, cancel); otherwise it is a plain relay.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response

from gateway.auth import Principal
from gateway.openai.prepare import PreparedRequest, prepare
from gateway.openai.relay import PlainStreamResponse, RelayContext
from gateway.stream_result import StreamResult

CompletionHook = Callable[[StreamResult], Awaitable[None]]


def relay_context(request: Request, principal: Principal) -> RelayContext:
    state = request.app.state
    return RelayContext(
        upstream=state.upstream,
        metrics=state.metrics,
        principal=principal,
        request_id=request.scope["state"]["request_id"],
        keepalive_seconds=state.settings.sse_keepalive_seconds,
    )


async def start_chat_stream(
    request: Request,
    prepared: PreparedRequest,
    *,
    principal: Principal,
    on_complete: CompletionHook | None = None,
) -> Response:
    sessions = getattr(request.app.state, "sessions", None)
    if sessions is None:
        return PlainStreamResponse(prepared, relay_context(request, principal), on_complete)
    return await sessions.stream(request, prepared, principal=principal, on_complete=on_complete)


async def stream_chat_completion(
    request: Request,
    payload: dict,
    *,
    principal: Principal,
    session_id: str | None = None,
    on_complete: CompletionHook | None = None,
) -> Response:
    """Stream a chat completion for ``payload`` (an OpenAI request body built by the caller)."""
    payload = {**payload, "stream": True}
    if session_id is not None:
        payload["session_id"] = session_id
    state = request.app.state
    prepared = prepare(
        None,
        payload,
        path="/v1/chat/completions",
        engine=state.engine,
        sessions_enabled=getattr(state, "sessions", None) is not None,
    )
    return await start_chat_stream(request, prepared, principal=principal, on_complete=on_complete)
