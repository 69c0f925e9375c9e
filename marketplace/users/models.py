"""The users' tables: marketplace users, owned by the API key that registered them, and their
end-user tokens (``users.tokens``)."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import Boolean, Float, ForeignKey, Index, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from marketplace.database.tables import Base, JsonType, UTCDateTime, utcnow
from marketplace.inputs import NAME_MAX

EMAIL_MAX = 254
PUBLIC_ID_MAX = 36  # a UUID in its canonical text form
KEY_ID_MAX = 64  # a gateway key id (16 hex digits today)


def new_public_id() -> str:
    """The id users and conversations are known by outside: a random UUID, not guessable like the row id."""
    return str(uuid.uuid4())


class Owned:
    """A row known outside by ``public_id`` and owned by the API key that created it (its key id).

    Both columns are nullable in the schema: migration 0004 adds them to tables that may hold
    rows, and SQLite cannot make an added column NOT NULL without rebuilding the table (which,
    with foreign keys on, would cascade-delete the rows that refer to it). The application
    always sets ``public_id``; an ``owner_key_id`` of NULL marks a row from before ownership,
    which only admin keys see (``users.access``).
    """

    public_id: Mapped[str | None] = mapped_column(String(PUBLIC_ID_MAX), default=new_public_id)
    owner_key_id: Mapped[str | None] = mapped_column(String(KEY_ID_MAX), nullable=True)


class User(Owned, Base):
    """A marketplace user. Its email is unique among the users of its owner (migration 0005), not
    across owners: no answer to one app tells it that another app has registered an email."""

    __tablename__ = "users"
    __table_args__ = (Index("ix_users_public_id", "public_id", unique=True),
                      Index("ix_users_owner_key_id", "owner_key_id"),
                      UniqueConstraint("owner_key_id", "email", name="uq_users_owner_email"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(NAME_MAX))
    email: Mapped[str] = mapped_column(String(EMAIL_MAX))
    lat: Mapped[float | None] = mapped_column(Float, nullable=True)
    lng: Mapped[float | None] = mapped_column(Float, nullable=True)
    ai_access_enabled: Mapped[bool] = mapped_column(Boolean, default=False)
    preferences: Mapped[dict] = mapped_column(JsonType, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class UserToken(Base):
    """An end-user token (``marketplace.users.tokens``): only its SHA-256 is kept, never the token."""

    __tablename__ = "user_tokens"

    id: Mapped[str] = mapped_column(String(PUBLIC_ID_MAX), primary_key=True)  # the token id (public)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    # The key id of the key that minted it: a token of a key no longer configured is refused, then deleted.
    issued_by: Mapped[str] = mapped_column(String(KEY_ID_MAX), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)  # hex SHA-256 of the token
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)  # deleted once past (the clean-up)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
