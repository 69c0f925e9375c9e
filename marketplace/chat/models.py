"""The chat's tables: conversations (a user's chat threads, owned like the user) and their messages."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from gateway.api import SESSION_ID_MAX  # a conversation's name follows the gateway's session id rule
from marketplace.database.tables import Base, BigId, JsonType, UTCDateTime, utcnow
from marketplace.users.models import Owned, User

ROLE_MAX = 16


class Conversation(Owned, Base):
    """A user's chat thread. Its ``name`` is unique per user (migration 0005): every user has their
    own names, so no answer tells anyone that another user's conversation has one."""

    __tablename__ = "conversations"
    __table_args__ = (Index("ix_conversations_public_id", "public_id", unique=True),
                      UniqueConstraint("user_id", "name", name="uq_conversations_user_name"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    # The name the client gave it (the API's ``session_id`` field), or one generated for it.
    name: Mapped[str] = mapped_column(String(SESSION_ID_MAX))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # When it was last opened or added to: past MARKETPLACE_CONVERSATION_RETENTION_DAYS it is
    # deleted with its messages (marketplace.cleanup). Nullable in the schema (migration 0006
    # adds it to a table that may hold rows); the application always sets it.
    last_active_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True, default=utcnow,
                                                            index=True)

    messages: Mapped[list[Message]] = relationship(
        back_populates="conversation", order_by="Message.id"
    )
    user: Mapped[User] = relationship()


class Message(Base):
    __tablename__ = "messages"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    conversation_id: Mapped[int] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), index=True
    )
    role: Mapped[str] = mapped_column(String(ROLE_MAX))
    content: Mapped[str] = mapped_column(Text)
    timestamp: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # For assistant turns: the product ids offered to the model, the model name,
    # finish reason and token usage, so a conversation record shows what the
    # engine was given.
    details: Mapped[dict | None] = mapped_column(JsonType, nullable=True)

    conversation: Mapped[Conversation] = relationship(back_populates="messages")
