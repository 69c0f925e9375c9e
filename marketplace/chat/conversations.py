"""Stored chat conversations: read back by who may see them, and deleted once inactive too long.

A conversation is owned like its user (``users.access``): the key that created it sees it, an
end-user token sees its own user's, and anyone else gets the 404 of an id that does not exist.
A conversation not used since before the retention cut-off is deleted with its messages by the
clean-up (``marketplace.cleanup``), a bounded batch of rows per statement, so no pass holds a
long transaction however much has piled up: its messages first, then the conversations left
without any.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ColumnElement, delete, exists, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import contains_eager, selectinload

from gateway.api import Principal
from marketplace.chat.models import Conversation, Message
from marketplace.errors import NotFound
from marketplace.users.access import owned_by
from marketplace.users.models import User


async def get_conversation(*, db: AsyncSession, conversation_id: str, principal: Principal,
                           with_messages: bool = True, field: str | None = None) -> Conversation:
    """The conversation (its user loaded, and its messages unless ``with_messages`` is false) if
    ``principal`` may see it; 404 (naming ``field``) otherwise."""
    query = (
        select(Conversation)
        .join(User, Conversation.user_id == User.id)
        .where(Conversation.public_id == conversation_id, conversations_visible_to(principal))
        .options(contains_eager(Conversation.user))
    )
    if with_messages:
        query = query.options(selectinload(Conversation.messages))
    conversation = await db.scalar(query)
    if conversation is None:
        raise NotFound("conversation", conversation_id, field=field)
    return conversation


def conversations_visible_to(principal: Principal) -> ColumnElement[bool]:
    """A WHERE clause on ``Conversation`` (joined with its ``User``) for what ``principal`` may see."""
    if principal.is_end_user:
        return User.public_id == principal.subject
    return owned_by(Conversation.owner_key_id, principal)


async def delete_inactive(*, db: AsyncSession, before: datetime, limit: int) -> tuple[int, int]:
    """Delete up to ``limit`` messages of conversations inactive since ``before``, then up to ``limit`` of
    those conversations that have no message left; (messages, conversations) deleted."""
    inactive = Conversation.last_active_at < before
    messages = select(Message.id).join(Conversation, Message.conversation_id == Conversation.id).where(inactive)
    gone_messages = (await db.execute(delete(Message).where(Message.id.in_(messages.limit(limit))))).rowcount
    empty = select(Conversation.id).where(inactive, ~exists().where(Message.conversation_id == Conversation.id))
    gone = (await db.execute(delete(Conversation).where(Conversation.id.in_(empty.limit(limit))))).rowcount
    await db.commit()
    return gone_messages, gone
