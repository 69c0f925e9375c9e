"""The marketplace tables as typed SQLAlchemy 2 models.

The schema itself is created by the Alembic migrations in ``migrations/``; these
classes describe it to the ORM, and a test checks that both agree on SQLite and
PostgreSQL. Types are chosen to mean the same on both databases: prices are
integers (IDR has no minor unit), timestamps are stored in UTC and read back
timezone-aware, JSON becomes JSONB on PostgreSQL.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    TypeDecorator,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from gateway.api import SESSION_ID_MAX  # the gateway's rule: a conversation's session id names its stream
from marketplace import sphere

# Field bounds, shared with the request schemas and the prompt builder.
NAME_MAX = 200
EMAIL_MAX = 254
ADDRESS_MAX = 500
CONTACT_MAX = 200
DESCRIPTION_MAX = 5000
CATEGORY_MAX = 64
TAG_MAX = 40
TAGS_MAX = 20
ROLE_MAX = 16
PUBLIC_ID_MAX = 36  # a UUID in its canonical text form
KEY_ID_MAX = 64  # a gateway key id (gateway.http.key_ids: 16 hex digits today)
# Prices are whole rupiah from 0 to PRICE_MAX: what a product may cost, what a search may ask
# for and what the query parser reads as a price. One trillion rupiah is far above any catalogue
# item and far below BIGINT.
PRICE_MAX = 10**12

JsonType = JSON().with_variant(JSONB(), "postgresql")
# SQLite only auto-numbers a column declared exactly INTEGER PRIMARY KEY.
BigId = BigInteger().with_variant(Integer(), "sqlite")


def utcnow() -> datetime:
    return datetime.now(UTC)


def new_public_id() -> str:
    """The id users and conversations are known by outside: a random UUID, not guessable like the row id."""
    return str(uuid.uuid4())


class UTCDateTime(TypeDecorator):
    """A timestamp stored in UTC and always read back timezone-aware (SQLite drops the zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given for a UTC column")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value


class Base(DeclarativeBase):
    pass


def _unit_vector_component(index: int):
    """A column default: one component of the unit vector of the row's (lat, lng) (``marketplace.sphere``)."""

    def default(context) -> float:
        row = context.get_current_parameters()
        return sphere.unit_vector(row["lat"], row["lng"])[index]

    return default


class Supplier(Base):
    __tablename__ = "suppliers"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(NAME_MAX))
    business_name: Mapped[str] = mapped_column(String(NAME_MAX))
    lat: Mapped[float] = mapped_column(Float)
    lng: Mapped[float] = mapped_column(Float)
    address: Mapped[str] = mapped_column(String(ADDRESS_MAX), default="")
    contact: Mapped[str] = mapped_column(String(CONTACT_MAX), default="")
    registration_date: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    # The position as a unit vector: the search's cheap certain distance bounds. Filled from
    # lat/lng on insert; code that moves a supplier must set them too (sphere.unit_vector).
    # NULL (a row written around the application) only makes the search compute the exact
    # distance for that supplier.
    ux: Mapped[float | None] = mapped_column(Float, nullable=True, default=_unit_vector_component(0))
    uy: Mapped[float | None] = mapped_column(Float, nullable=True, default=_unit_vector_component(1))
    uz: Mapped[float | None] = mapped_column(Float, nullable=True, default=_unit_vector_component(2))

    products: Mapped[list[Product]] = relationship(back_populates="supplier")

    # The bounding-box prefilter of the SQLite search ranges over these columns.
    __table_args__ = (Index("ix_suppliers_lat_lng", "lat", "lng"),)


class Product(Base):
    __tablename__ = "products"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    supplier_id: Mapped[int] = mapped_column(
        ForeignKey("suppliers.id", ondelete="CASCADE"), index=True
    )
    name: Mapped[str] = mapped_column(String(NAME_MAX))
    description: Mapped[str] = mapped_column(Text, default="")
    price: Mapped[int] = mapped_column(BigInteger)  # IDR
    stock_quantity: Mapped[int] = mapped_column(Integer, default=0)
    category: Mapped[str] = mapped_column(String(CATEGORY_MAX), index=True)
    tags: Mapped[list[str]] = mapped_column(JsonType, default=list)
    # "|tag1|tag2|", lower case: lets both databases match whole tags with LIKE.
    tags_text: Mapped[str] = mapped_column(Text, default="|")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)

    supplier: Mapped[Supplier] = relationship(back_populates="products")

    # No index on price on purpose: price bounds are broad, and SQLite would pick
    # such an index over a sequential scan and pay a random read per row.
    __table_args__ = (
        CheckConstraint("price >= 0", name="ck_products_price_nonnegative"),
        CheckConstraint("stock_quantity >= 0", name="ck_products_stock_nonnegative"),
    )


class Owned:
    """A row known outside by ``public_id`` and owned by the API key that created it (its key id).

    Both columns are nullable in the schema: migration 0004 adds them to tables that may hold
    rows, and SQLite cannot make an added column NOT NULL without rebuilding the table (which,
    with foreign keys on, would cascade-delete the rows that refer to it). The application
    always sets ``public_id``; an ``owner_key_id`` of NULL marks a row from before ownership,
    which only admin keys see (``marketplace.access``).
    """

    public_id: Mapped[str | None] = mapped_column(String(PUBLIC_ID_MAX), default=new_public_id)
    owner_key_id: Mapped[str | None] = mapped_column(String(KEY_ID_MAX), nullable=True)


class User(Owned, Base):
    __tablename__ = "users"
    __table_args__ = (Index("ix_users_public_id", "public_id", unique=True),
                      Index("ix_users_owner_key_id", "owner_key_id"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(NAME_MAX))
    email: Mapped[str] = mapped_column(String(EMAIL_MAX), unique=True)
    lat: Mapped[float | None] = mapped_column(Float, nullable=True)
    lng: Mapped[float | None] = mapped_column(Float, nullable=True)
    ai_access_enabled: Mapped[bool] = mapped_column(Boolean, default=False)
    preferences: Mapped[dict] = mapped_column(JsonType, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Conversation(Owned, Base):
    __tablename__ = "conversations"
    __table_args__ = (Index("ix_conversations_public_id", "public_id", unique=True),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    session_id: Mapped[str] = mapped_column(String(SESSION_ID_MAX), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

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


class UserToken(Base):
    """An end-user token (``marketplace.tokens``): only its SHA-256 is kept, never the token."""

    __tablename__ = "user_tokens"

    id: Mapped[str] = mapped_column(String(PUBLIC_ID_MAX), primary_key=True)  # the token id (public)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    issued_by: Mapped[str] = mapped_column(String(KEY_ID_MAX))  # key id of the key that minted it
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)  # hex SHA-256 of the token
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)


class Secret(Base):
    """Keys the marketplace keeps in its own database, so every worker and replica shares them."""

    __tablename__ = "marketplace_secrets"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(String(256))


def tags_text_for(tags: list[str]) -> str:
    """The ``tags_text`` column value for a list of tags."""
    return "|" + "".join(f"{tag.lower()}|" for tag in tags)
