"""``/api/chat`` with ``stream: true``: the answer as server-sent events.

The stream goes through the gateway's one streaming path
(``Gateway.stream_chat_completion`` of ``gateway.api``: resumable sessions when
they are enabled, a plain relay otherwise). Its first response headers carry
what the JSON answer would: ``X-Conversation-Id``, ``X-Chat-Session-Id`` and
``X-Product-Ids`` (the products the model was shown, in order).

Storage differs from the non-streamed call in one way: the conversation row is
created before the stream starts, so its id can be sent in the headers. The
two messages are stored together only when the generation completes; a stream
that fails or is cut off stores no message (the conversation stays, empty or
as it was).
"""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from gateway.api import Gateway, StreamResult
from marketplace import chat

log = logging.getLogger("marketplace.chat")


class HeadersAdded(Response):
    """Another ASGI response, with extra headers on its ``http.response.start``."""

    def __init__(self, inner: Response, headers: dict[str, str]) -> None:
        self.inner = inner
        self.extra = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
        self.status_code = getattr(inner, "status_code", 200)
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *self.extra]}
            await send(message)

        await self.inner(scope, receive, send_with_headers)


async def stream_chat(
    *, gateway: Gateway, http_request: Request, session_factory, **plan_options
) -> Response:
    """Plan the chat, open the conversation, stream the engine's answer, store it when complete."""
    plan = await chat.plan_chat(session_factory=session_factory, **plan_options)
    conversation_id = await chat.open_conversation(session_factory=session_factory, plan=plan)

    async def on_complete(result: StreamResult) -> None:
        if result.how != "completed" or result.error:
            log.info("chat stream ended without an answer: nothing stored",
                     extra={"how": result.how, "conversation_id": conversation_id})
            return
        answer = chat.ChatAnswer(text=result.text, finish_reason=result.finish_reason, usage=result.usage)
        try:
            await chat.record_exchange(session_factory=session_factory, plan=plan, answer=answer)
        except Exception:  # the client has its answer; a failed write must not break the stream
            log.exception("could not store a streamed chat exchange", extra={"conversation_id": conversation_id})

    response = await gateway.stream_chat_completion(http_request, plan.payload, on_complete=on_complete)
    return HeadersAdded(
        response,
        {
            "X-Conversation-Id": str(conversation_id),
            "X-Chat-Session-Id": plan.session_id,
            "X-Product-Ids": ",".join(str(hit.product.id) for hit in plan.hits),
        },
    )
