"""Marketplace users: registration and look-up.

Emails are stored lower-cased and unique. A duplicate is found by the
database's unique constraint on the INSERT itself (a 409), not by a read
first: one statement, no race, and no read-to-write lock upgrade on SQLite.
"""

from __future__ import annotations

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from marketplace.errors import Conflict, NotFound
from marketplace.models import User, utcnow
from marketplace.schemas import UserCreate


async def create_user(*, session: AsyncSession, data: UserCreate) -> User:
    """Register a user; 409 if the email is taken."""
    user = User(
        name=data.name,
        email=data.email,
        lat=data.location.lat if data.location else None,
        lng=data.location.lng if data.location else None,
        ai_access_enabled=data.ai_access_enabled,
        preferences=data.preferences,
        created_at=utcnow(),
    )
    session.add(user)
    try:
        await session.commit()
    except IntegrityError as exc:
        await session.rollback()
        raise Conflict("email", "already registered") from exc
    return user


async def get_user(*, session: AsyncSession, user_id: int, field: str | None = None) -> User:
    """The user with this id, or 404."""
    user = await session.get(User, user_id)
    if user is None:
        raise NotFound("user", user_id, field=field)
    return user
