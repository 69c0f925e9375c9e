"""The chat part's routes: ``POST /api/chat`` (answered, or streamed with ``stream: true``; a
stream resumed with ``Last-Event-ID``), the stored conversations, and the stream of a
conversation's answer for a browser's ``EventSource`` (``GET /api/conversations/{id}/events``).

Reached by a key that acts for users (for one of its users) or by an end-user token (as its
own user): ``UserDataDep``. Each conversation belongs to the key that created it; whatever a
caller may not see is a 404 (``chat.conversations``).
"""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Path, Request, Response

from gateway.api import UserDataDep, last_event_id, request_id, unless_client_leaves
from marketplace.chat import conversations, service
from marketplace.chat.schemas import ChatOut, ChatRequest, ConversationOut, MessageOut
from marketplace.chat.streaming import resume_conversation_stream, stream_chat
from marketplace.database.requests import DatabaseRoute, DbDep
from marketplace.places.routes import GazetteerDep
from marketplace.search.listing import hit_out
from marketplace.state import GatewayDep, feature_of

router = APIRouter(prefix="/api", tags=["marketplace"], route_class=DatabaseRoute)  # outages: 503

PublicId = Annotated[uuid.UUID, Path(description="a UUID")]


@router.post("/chat", response_model=ChatOut)
async def chat_message(
    body: ChatRequest, caller: UserDataDep, request: Request, gateway: GatewayDep, gazetteer: GazetteerDep
) -> Response | ChatOut:
    """Answer a user's question from nearby in-stock products; ``stream: true`` answers with SSE."""
    options = dict(
        db_factory=feature_of(request).database(),
        gazetteer=gazetteer,
        request=body,
        principal=caller,
        model=gateway.default_model,
        max_tokens=gateway.settings.default_max_tokens,
        temperature=gateway.settings.default_temperature,
    )
    if body.stream:
        return await stream_chat(gateway=gateway, http_request=request, **options)
    # A client that leaves cancels the work: vLLM aborts the generation, a queued one leaves the queue.
    outcome = await unless_client_leaves(request, service.chat(upstream=gateway, request_id=request_id(request),
                                                               **options))
    if isinstance(outcome, Response):  # (the client left: nobody reads it)
        return outcome
    return ChatOut(
        answer=outcome.answer.text,
        products=[hit_out(hit) for hit in outcome.plan.hits],
        conversation_id=outcome.conversation_id,
        conversation_name=outcome.plan.conversation_name,
        parsed=outcome.plan.parsed,
        fallback=outcome.plan.fallback,
        finish_reason=outcome.answer.finish_reason,
        usage=outcome.answer.usage,
    )


@router.get("/conversations/{conversation_id}")
async def get_conversation(conversation_id: PublicId, caller: UserDataDep, db: DbDep) -> ConversationOut:
    conversation = await conversations.get_conversation(db=db, conversation_id=str(conversation_id),
                                                        principal=caller)
    return ConversationOut(
        id=conversation.public_id,
        user_id=conversation.user.public_id,
        conversation_name=conversation.name,
        created_at=conversation.created_at,
        messages=[
            MessageOut(id=m.id, role=m.role, content=m.content, timestamp=m.timestamp, details=m.details)
            for m in conversation.messages
        ],
    )


@router.get("/conversations/{conversation_id}/events", response_class=Response,
            responses={200: {"content": {"text/event-stream": {}}}, 204: {"description": "nothing left to send"}})
async def conversation_events(conversation_id: PublicId, caller: UserDataDep, request: Request,
                              gateway: GatewayDep) -> Response:
    """The stream of the conversation's latest streamed answer: after ``Last-Event-ID`` (or
    ``?last_event_id=``; none: from the start), then live, as ``POST /api/chat`` resumes it."""
    return await resume_conversation_stream(
        gateway=gateway, http_request=request, db_factory=feature_of(request).database(), principal=caller,
        conversation_id=str(conversation_id), resume_from=last_event_id(request),
    )
