"""``/api/chat`` with ``stream: true``: the answer as server-sent events, resumable.

The stream goes through the gateway's one streaming path
(``Gateway.stream_chat_completion`` of ``gateway.api``: resumable sessions when
they are enabled, a plain relay otherwise). Its first response headers carry
what the JSON answer would: ``X-Conversation-Id``, ``X-Chat-Session-Id`` and
``X-Product-Ids`` (the products the model was shown, in order).

**Resume.** With sessions on, the stream is the session named by the
conversation's public id (a random UUID, in ``X-Session-ID`` and in every
event's ``id: <conversation id>:<index>``), never by the conversation's name,
which the client chose and another user of the same key may share: sessions
belong to the calling key, and all of a key's end users share it. Naming the
session makes the generation outlive a dropped client
(``CANCEL_AFTER_DISCONNECT_SECONDS``). The client resumes with the same POST and
``Last-Event-ID`` (or ``GET /api/conversations/{id}/events``, for an
``EventSource``); the marketplace first checks that the caller may see the
conversation the position names (the 404 of an unknown conversation
otherwise), then the gateway replays from the session's log. A conversation
generates one answer at a time: a new message while one streams is the
gateway's ``409 session_busy``.

Storage differs from the non-streamed call in one way: the conversation row is
created before the stream starts, so its id can be sent in the headers. The
two messages are stored together only when the generation completes, once,
by the generation itself (``on_complete``), whether its first client stayed,
left or resumed; a stream that fails or is cut off (cancelled, or no client
came back in time) stores no message (the conversation stays, empty or as it was).
"""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from gateway.api import Gateway, GatewayError, Principal, StreamResult, last_event_id, resume_point
from marketplace.chat import service as chat
from marketplace.chat.conversations import get_conversation
from marketplace.chat.schemas import ChatRequest
from marketplace.errors import NotFound, invalid_field

log = logging.getLogger("marketplace.chat")

FROM_THE_START = "-1"  # a resume position before the first event


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
    *, gateway: Gateway, http_request: Request, db_factory, request: ChatRequest, principal: Principal,
    **plan_options,
) -> Response:
    """Plan the chat, open the conversation, stream the engine's answer, store it when complete;
    or, with ``Last-Event-ID``, resume the stream of a conversation's answer."""
    resume_from = last_event_id(http_request)
    if resume_from is not None:
        point = resume_point(resume_from)
        return await resume_conversation_stream(
            gateway=gateway, http_request=http_request, db_factory=db_factory, principal=principal,
            conversation_id=point.session_id, resume_from=resume_from, request=request,
        )
    plan = await chat.plan_chat(db_factory=db_factory, request=request, principal=principal, **plan_options)
    conversation_id = await chat.open_conversation(db_factory=db_factory, plan=plan)

    async def on_complete(result: StreamResult) -> None:
        if result.how != "completed" or result.error:
            log.info("chat stream ended without an answer: nothing stored",
                     extra={"how": result.how, "conversation_id": conversation_id})
            return
        answer = chat.ChatAnswer(text=result.text, finish_reason=result.finish_reason, usage=result.usage)
        try:
            await chat.record_exchange(db_factory=db_factory, plan=plan, answer=answer)
        except NotFound:
            log.info("chat stream completed for a user erased meanwhile: nothing stored",
                     extra={"conversation_id": conversation_id})
        except Exception:  # the client has its answer; a failed write must not break the stream
            log.exception("could not store a streamed chat exchange", extra={"conversation_id": conversation_id})

    session_id = conversation_id if gateway.resumable_streams else None
    response = await gateway.stream_chat_completion(http_request, plan.payload, session_id=session_id,
                                                    on_complete=on_complete)
    return HeadersAdded(
        response,
        {
            "X-Conversation-Id": str(conversation_id),
            "X-Chat-Session-Id": plan.conversation_name,
            "X-Product-Ids": ",".join(str(hit.product.id) for hit in plan.hits),
        },
    )


async def resume_conversation_stream(
    *, gateway: Gateway, http_request: Request, db_factory, principal: Principal, conversation_id: str,
    resume_from: str | None, request: ChatRequest | None = None,
) -> Response:
    """The stream of ``conversation_id``'s answer after ``resume_from`` (None: from its start), if
    ``principal`` may see the conversation (404 otherwise); ``request``: the POST's body, whose
    ``user_id`` and ``session_id`` (when given) must be the conversation's."""
    if not gateway.resumable_streams:
        raise GatewayError(400, "resumable sessions are disabled on this gateway (SESSION_STORE=off): "
                                "a streamed chat cannot be resumed", param="last_event_id", code="sessions_disabled")
    # Checked before the gateway is asked, so its answers (404, 410, 204) tell nobody anything
    # about a conversation they may not see.
    resume_point(resume_from or FROM_THE_START, session_id=conversation_id)
    async with db_factory() as db:
        conversation = await get_conversation(db=db, conversation_id=conversation_id, principal=principal,
                                              with_messages=False, field="last_event_id")
        user_public_id, name = conversation.user.public_id, conversation.name
    if request is not None:
        if request.user_id is not None and str(request.user_id) != user_public_id:
            raise NotFound("conversation", conversation_id, field="last_event_id")
        if request.conversation_name is not None and request.conversation_name != name:
            raise invalid_field("body", "session_id", f"Last-Event-ID resumes conversation {conversation_id}, "
                                                      f"whose session_id is not {request.conversation_name!r}")
    response = await gateway.stream_chat_completion(http_request, {}, session_id=conversation_id,
                                                    resume_from=resume_from or FROM_THE_START)
    return HeadersAdded(response, {"X-Conversation-Id": conversation_id, "X-Chat-Session-Id": name})
