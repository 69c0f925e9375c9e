"""Stored chat conversations: read back with their messages, oldest first."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import selectinload

from marketplace.errors import NotFound
from marketplace.models import Conversation


async def get_conversation(*, session: AsyncSession, conversation_id: int) -> Conversation:
    """The conversation with its messages, or 404."""
    conversation = await session.scalar(
        select(Conversation)
        .where(Conversation.id == conversation_id)
        .options(selectinload(Conversation.messages))
    )
    if conversation is None:
        raise NotFound("conversation", conversation_id)
    return conversation
