"""Marketplace users: registration, look-up, changes and erasure, by the key that owns them.

A user is registered by an app or admin key, which then owns it (``owner_key_id``); it is
known outside by its ``public_id`` (a UUID), and only its owner (and an end-user token
issued for it) finds it: ``marketplace.users.access``. Emails are stored lower-cased and
unique among the users of one key (migration 0005). A duplicate is found by the database's
unique constraint on the INSERT itself (a 409), not by a read first: one statement, no race,
and no read-to-write lock upgrade on SQLite.

Erasure deletes the user's row (name, email, location, preferences) in one statement; the
schema's ``ON DELETE CASCADE`` (migration 0001, enforced on every SQLite connection:
``database.engines``) deletes its conversations, their messages and its tokens with it, in the
same transaction.
"""

from __future__ import annotations

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.api import Principal
from marketplace.database.tables import utcnow
from marketplace.errors import Conflict, NotFound
from marketplace.users.access import users_erasable_by, users_visible_to
from marketplace.users.models import User
from marketplace.users.schemas import UserCreate, UserUpdate


async def create_user(*, db: AsyncSession, data: UserCreate, owner: Principal) -> User:
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
    db.add(user)
    try:
        await db.commit()
    except IntegrityError as exc:
        await db.rollback()
        raise Conflict("email", "already registered") from exc
    return user


async def get_user(*, db: AsyncSession, user_id: str, principal: Principal, field: str | None = None) -> User:
    """The user with this public id if ``principal`` may see it; 404 otherwise (whether or not it exists)."""
    user = await db.scalar(select(User).where(User.public_id == user_id, users_visible_to(principal)))
    if user is None:
        raise NotFound("user", user_id, field=field)
    return user


async def update_user(*, db: AsyncSession, user_id: str, principal: Principal, changes: UserUpdate) -> User:
    """Change the fields given in ``changes``; 404 as ``get_user``."""
    user = await get_user(db=db, user_id=user_id, principal=principal)
    given = changes.model_fields_set
    if "name" in given and changes.name is not None:
        user.name = changes.name
    if "location" in given:
        user.lat, user.lng = (changes.location.lat, changes.location.lng) if changes.location else (None, None)
    if "ai_access_enabled" in given and changes.ai_access_enabled is not None:
        user.ai_access_enabled = changes.ai_access_enabled
    if "preferences" in given and changes.preferences is not None:
        user.preferences = changes.preferences
    await db.commit()
    return user


async def erase_user(*, db: AsyncSession, user_id: str, principal: Principal) -> None:
    """Delete the user and everything kept about them (see the module docstring); 404 if ``principal``
    may not erase it, exactly as for an id that does not exist."""
    result = await db.execute(delete(User).where(User.public_id == user_id, users_erasable_by(principal)))
    await db.commit()
    if result.rowcount == 0:
        raise NotFound("user", user_id)
