"""/api/chat: a user's question answered by the engine from real, in-stock, nearby products.

Flow (three steps, so no database connection is held while the engine thinks):
1. ``plan_chat`` reads: the user, as the caller may see it (404 for a user of another key or,
   with an end-user token, any other user: ``marketplace.users.access``; 403 when ``ai_access_enabled`` is off),
   the user's conversation of that name (``session_id`` in the API) if it exists (names are
   the user's own: another user's conversation of the same name is another conversation, and
   nothing answers differently for it), its recent turns; parses the question; searches
   in-stock products nearest first; builds the messages (``marketplace.chat.prompt``).
2. the engine answers (``answer_plan``), or the request fails with the
   engine's 502/503/504.
3. ``record_exchange`` stores the user message and the answer together, in one
   transaction, creating the conversation on its first exchange (or again, if the clean-up
   deleted it meanwhile), and marks it active; a user erased meanwhile is a 404 and nothing
   is stored.
If the engine fails, nothing is stored: no conversation, no orphan question.
The client may simply retry with the same conversation name.

``stream: true`` follows the same plan through the gateway's streaming path:
see ``marketplace.chat.streaming``.

The stored user message is the text as sent to the engine (after template
tokens and control characters were removed); the assistant message records,
in ``details``, which products the model was shown and what the engine said
about the generation.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.api import BadGateway, EngineHTTPError, Principal
from marketplace.chat import prompt
from marketplace.chat.models import Conversation, Message
from marketplace.chat.schemas import ChatRequest
from marketplace.database.tables import utcnow
from marketplace.errors import Forbidden, NotFound, invalid_field
from marketplace.places import geo
from marketplace.search.listing import criteria_from_parsed, search_origin
from marketplace.search.query import parse_query
from marketplace.search.service import Hit, search_products
from marketplace.untrusted import clean_user_message
from marketplace.users.models import User
from marketplace.users.service import get_user

HISTORY_TOKEN_BUDGET = 1500
HISTORY_MAX_MESSAGES = 40
CHAT_PATH = "/v1/chat/completions"


@dataclass
class ChatPlan:
    user_id: int  # the row id (internal)
    user_public_id: str
    owner_key_id: str  # the key id a new conversation is owned by (the caller's)
    conversation_name: str  # the API's session_id
    conversation_id: int | None  # the row id; None: the conversation starts with this exchange
    user_message: str  # as sent to the engine
    parsed: dict[str, Any]
    hits: list[Hit]
    fallback: list[str]
    location_source: str | None
    payload: dict[str, Any] = field(repr=False)


@dataclass
class ChatAnswer:
    text: str
    finish_reason: str | None
    usage: dict[str, Any] | None


def new_conversation_name() -> str:
    return "chat-" + secrets.token_urlsafe(16)


def choose_location(*, parsed, request: ChatRequest, user) -> tuple[geo.Point | None, str | None]:
    """Where to search from (``listing.search_origin``); a place named in the question is ``"message"``."""
    point, source = search_origin(
        named_place=parsed.place.point if parsed.place is not None else None,
        request_location=request.location.point() if request.location is not None else None,
        user_location=geo.Point(user.lat, user.lng) if user.lat is not None and user.lng is not None else None,
    )
    return point, "message" if source == "place" else source


async def _recent_turns(db: AsyncSession, conversation_id: int) -> list[tuple[str, str]]:
    rows = await db.execute(
        select(Message.role, Message.content)
        .where(Message.conversation_id == conversation_id)
        .order_by(Message.id.desc())
        .limit(HISTORY_MAX_MESSAGES)
    )
    return [(role, content) for role, content in reversed(rows.all())]


async def plan_chat(
    *,
    db_factory: async_sessionmaker[AsyncSession],
    gazetteer,
    request: ChatRequest,
    principal: Principal,
    model: str,
    max_tokens: int,
    temperature: float,
) -> ChatPlan:
    """Everything to send to the engine for ``request``, read in one short database session."""
    user_id = str(request.user_id) if request.user_id is not None else principal.subject
    if user_id is None:
        raise invalid_field("body", "user_id", "user_id is required with an API key (an end-user token names its user)")
    async with db_factory() as db:
        user = await get_user(db=db, user_id=user_id, principal=principal, field="user_id")
        if not user.ai_access_enabled:
            raise Forbidden(f"user {user.public_id} has AI access disabled (ai_access_enabled is false)")
        conversation_name = request.conversation_name or new_conversation_name()
        conversation = await _named(db, user_id=user.id, name=conversation_name)
        turns = await _recent_turns(db, conversation.id) if conversation else []

        parsed = parse_query(request.message, gazetteer=gazetteer)
        location, location_source = choose_location(parsed=parsed, request=request, user=user)
        criteria = criteria_from_parsed(
            parsed, location=location, radius_km=None, in_stock=True, limit=prompt.MAX_PRODUCTS
        )
        page = await search_products(db=db, criteria=criteria)

    notes = {
        "location": parsed.place.name if location_source == "message" else location_source,
        "radius_km": page.criteria.radius_km,
        "fallback": page.fallback,
    }
    user_message = clean_user_message(request.message)
    messages = prompt.build_messages(
        system=prompt.system_message(hits=page.hits, notes=notes),
        history=prompt.history_within_budget(turns, budget_tokens=HISTORY_TOKEN_BUDGET),
        user_message=user_message,
    )
    return ChatPlan(
        user_id=user.id,
        user_public_id=user.public_id,
        owner_key_id=principal.key_id,
        conversation_name=conversation_name,
        conversation_id=conversation.id if conversation else None,
        user_message=user_message,
        parsed=parsed.as_dict(),
        hits=page.hits,
        fallback=page.fallback,
        location_source=location_source,
        # ``user``: OpenAI's end-user field; the gateway counts the call against this user's share of
        # the key's limits (its end_user limits), whether an app key or the user's own token calls.
        payload={"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": temperature,
                 "user": user.public_id},
    )


async def answer_plan(*, upstream, plan: ChatPlan, request_id: str | None) -> ChatAnswer:
    """The engine's answer to ``plan`` (502/503/504 gateway errors when it cannot give one)."""
    try:
        response = await upstream.post_json(CHAT_PATH, plan.payload, request_id=request_id)
    except EngineHTTPError as exc:
        # The gateway built this request: an engine 4xx is the gateway's problem, not the client's.
        raise BadGateway(f"the inference engine refused the chat request: {exc.message}") from exc
    try:
        choice = response["choices"][0]
        text = choice["message"].get("content") or ""
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise BadGateway("the inference engine sent a chat completion without a message") from exc
    return ChatAnswer(text=text, finish_reason=choice.get("finish_reason"), usage=response.get("usage"))


async def record_exchange(
    *, db_factory: async_sessionmaker[AsyncSession], plan: ChatPlan, answer: ChatAnswer
) -> str:
    """Store the question and the answer atomically; returns the conversation's public id."""
    return await _in_transaction(db_factory, lambda db: _store(db, plan, answer))


async def _named(db: AsyncSession, *, user_id: int, name: str) -> Conversation | None:
    """The user's conversation of this name (names are unique per user: migration 0005)."""
    return await db.scalar(select(Conversation).where(Conversation.user_id == user_id, Conversation.name == name))


async def _conversation_for(db: AsyncSession, plan: ChatPlan) -> Conversation:
    """``plan``'s conversation, marked active now; created if it does not exist (yet, or any more)."""
    now = utcnow()
    conversation = await _named(db, user_id=plan.user_id, name=plan.conversation_name)
    if conversation is None:
        if await db.scalar(select(User.id).where(User.id == plan.user_id)) is None:
            # Erased while the engine answered (its conversations went with it): store nothing.
            raise NotFound("user", plan.user_public_id, field="user_id")
        conversation = Conversation(user_id=plan.user_id, name=plan.conversation_name, created_at=now,
                                    last_active_at=now, owner_key_id=plan.owner_key_id)
        db.add(conversation)
        await db.flush()  # IntegrityError here if another request created it first
    else:
        conversation.last_active_at = now
    return conversation


async def open_conversation(*, db_factory: async_sessionmaker[AsyncSession], plan: ChatPlan) -> str:
    """The public id of ``plan``'s conversation, created now if it does not exist yet (streamed chats)."""
    return await _in_transaction(db_factory, lambda db: _conversation_id(db, plan))


async def _conversation_id(db: AsyncSession, plan: ChatPlan) -> str:
    return (await _conversation_for(db, plan)).public_id


async def _in_transaction(db_factory, work) -> str:
    """Run ``work(db)`` and commit; once more if a concurrent insert of the conversation won."""
    for attempt in range(2):
        async with db_factory() as db:
            try:
                result = await work(db)
                await db.commit()
                return result
            except IntegrityError:
                await db.rollback()
                if attempt:
                    raise
    raise AssertionError("unreachable")


async def _store(db: AsyncSession, plan: ChatPlan, answer: ChatAnswer) -> str:
    conversation = await _conversation_for(db, plan)
    now = utcnow()
    db.add_all(
        [
            Message(
                conversation_id=conversation.id,
                role="user",
                content=plan.user_message,
                timestamp=now,
                details={"parsed": plan.parsed, "location_source": plan.location_source},
            ),
            Message(
                conversation_id=conversation.id,
                role="assistant",
                content=answer.text,
                timestamp=now,
                details={
                    "product_ids": [hit.product.id for hit in plan.hits],
                    "fallback": plan.fallback,
                    "model": plan.payload["model"],
                    "finish_reason": answer.finish_reason,
                    "usage": answer.usage,
                },
            ),
        ]
    )
    await db.flush()
    return conversation.public_id


@dataclass
class ChatOutcome:
    plan: ChatPlan
    answer: ChatAnswer
    conversation_id: str  # public


async def chat(
    *,
    db_factory: async_sessionmaker[AsyncSession],
    upstream,
    gazetteer,
    request: ChatRequest,
    principal: Principal,
    model: str,
    max_tokens: int,
    temperature: float,
    request_id: str | None = None,
) -> ChatOutcome:
    """Answer one chat message (non-streamed) and store the exchange."""
    plan = await plan_chat(
        db_factory=db_factory,
        gazetteer=gazetteer,
        request=request,
        principal=principal,
        model=model,
        max_tokens=max_tokens,
        temperature=temperature,
    )
    answer = await answer_plan(upstream=upstream, plan=plan, request_id=request_id)
    conversation_id = await record_exchange(db_factory=db_factory, plan=plan, answer=answer)
    return ChatOutcome(plan=plan, answer=answer, conversation_id=conversation_id)
