"""Marketplace users: registration, look-up and changes, by the key that owns them.

A user is registered by an app or admin key, which then owns it (``owner_key_id``); it is
known outside by its ``public_id`` (a UUID), and only its owner (and an end-user token
issued for it) finds it: ``marketplace.access``. Emails are stored lower-cased and unique.
A duplicate is found by the database's unique constraint on the INSERT itself (a 409), not
by a read first: one statement, no race, and no read-to-write lock upgrade on SQLite.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.api import Principal
from marketplace.access import users_visible_to
from marketplace.errors import Conflict, NotFound
from marketplace.models import User, utcnow
from marketplace.schemas import UserCreate, UserUpdate


async def create_user(*, session: AsyncSession, data: UserCreate, owner: Principal) -> User:
    """Register a user owned by ``owner``'s key; 409 if the email is taken."""
    user = User(
        name=data.name,
        email=data.email,
        lat=data.location.lat if data.location else None,
        lng=data.location.lng if data.location else None,
        ai_access_enabled=data.ai_access_enabled,
        preferences=data.preferences,
        created_at=utcnow(),
        owner_key_id=owner.key_id,
    )
    session.add(user)
    try:
        await session.commit()
    except IntegrityError as exc:
        await session.rollback()
        raise Conflict("email", "already registered") from exc
    return user


async def get_user(*, session: AsyncSession, user_id: str, principal: Principal, field: str | None = None) -> User:
    """The user with this public id if ``principal`` may see it; 404 otherwise (whether or not it exists)."""
    user = await session.scalar(select(User).where(User.public_id == user_id, users_visible_to(principal)))
    if user is None:
        raise NotFound("user", user_id, field=field)
    return user


async def update_user(*, session: AsyncSession, user_id: str, principal: Principal, changes: UserUpdate) -> User:
    """Change the fields given in ``changes``; 404 as ``get_user``."""
    user = await get_user(session=session, user_id=user_id, principal=principal)
    given = changes.model_fields_set
    if "name" in given and changes.name is not None:
        user.name = changes.name
    if "location" in given:
        user.lat, user.lng = (changes.location.lat, changes.location.lng) if changes.location else (None, None)
    if "ai_access_enabled" in given and changes.ai_access_enabled is not None:
        user.ai_access_enabled = changes.ai_access_enabled
    if "preferences" in given and changes.preferences is not None:
        user.preferences = changes.preferences
    await session.commit()
    return user
