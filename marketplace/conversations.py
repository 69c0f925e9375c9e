"""Stored chat conversations: read back with their messages, oldest first, by who may see them."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import contains_eager, selectinload

from gateway.api import Principal
from marketplace.access import conversations_visible_to
from marketplace.errors import NotFound
from marketplace.models import Conversation, User


async def get_conversation(*, session: AsyncSession, conversation_id: str, principal: Principal) -> Conversation:
    """The conversation with its messages (and its user) if ``principal`` may see it; 404 otherwise."""
    conversation = await session.scalar(
        select(Conversation)
        .join(User, Conversation.user_id == User.id)
        .where(Conversation.public_id == conversation_id, conversations_visible_to(principal))
        .options(contains_eager(Conversation.user), selectinload(Conversation.messages))
    )
    if conversation is None:
        raise NotFound("conversation", conversation_id)
    return conversation
