"""The users part's routes: users (registered, read, changed) and their end-user tokens.

Users are reached by a key that acts for users (``AppDep``: ``APP_API_KEYS`` or
``ADMIN_API_KEYS``; a read key gets 403), or, for a user's own profile, by an end-user token
(``UserDataDep``, ``users.tokens``). Each user belongs to the key that created it; whatever a
caller may not see is a 404 (``users.access``).
"""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Path, status

from gateway.api import AppDep, UserDataDep
from marketplace.database.requests import DatabaseRoute, DbDep
from marketplace.users import service, tokens
from marketplace.users.schemas import TokenCreate, TokenOut, UserCreate, UserOut, UserUpdate

router = APIRouter(prefix="/api", tags=["marketplace"], route_class=DatabaseRoute)  # outages: 503

PublicId = Annotated[uuid.UUID, Path(description="a UUID")]


@router.post("/users", status_code=status.HTTP_201_CREATED)
async def create_user(body: UserCreate, caller: AppDep, db: DbDep) -> UserOut:
    """Register a user, owned by the calling key."""
    return UserOut.of(await service.create_user(db=db, data=body, owner=caller))


@router.get("/users/{user_id}")
async def get_user(user_id: PublicId, caller: UserDataDep, db: DbDep) -> UserOut:
    """A user of the calling key, or an end-user token's own profile."""
    return UserOut.of(await service.get_user(db=db, user_id=str(user_id), principal=caller))


@router.patch("/users/{user_id}")
async def update_user(user_id: PublicId, body: UserUpdate, caller: AppDep, db: DbDep) -> UserOut:
    return UserOut.of(await service.update_user(db=db, user_id=str(user_id), principal=caller, changes=body))


@router.delete("/users/{user_id}", status_code=status.HTTP_204_NO_CONTENT)
async def erase_user(user_id: PublicId, caller: AppDep, db: DbDep) -> None:
    """Erase a user: its profile, conversations, messages and tokens. The owning app key, or any admin key."""
    await service.erase_user(db=db, user_id=str(user_id), principal=caller)


@router.post("/users/{user_id}/tokens", status_code=status.HTTP_201_CREATED)
async def mint_token(
    user_id: PublicId, caller: AppDep, db: DbDep, body: TokenCreate | None = None
) -> TokenOut:
    """A short-lived token for this user's own client (browser, app): its profile, conversations and chat."""
    user = await service.get_user(db=db, user_id=str(user_id), principal=caller)
    row, token = await tokens.mint(db=db, user=user, issued_by=caller,
                                   ttl_seconds=(body or TokenCreate()).ttl_seconds)
    return TokenOut(token_id=row.id, token=token, user_id=user.public_id, expires_at=row.expires_at)


@router.delete("/users/{user_id}/tokens/{token_id}", status_code=status.HTTP_204_NO_CONTENT)
async def revoke_token(user_id: PublicId, token_id: PublicId, caller: AppDep, db: DbDep) -> None:
    user = await service.get_user(db=db, user_id=str(user_id), principal=caller)
    await tokens.revoke(db=db, user=user, token_id=str(token_id))


@router.delete("/users/{user_id}/tokens", status_code=status.HTTP_204_NO_CONTENT)
async def revoke_all_tokens(user_id: PublicId, caller: AppDep, db: DbDep) -> None:
    """Revoke every token of this user (a lost phone, a password change in the application)."""
    user = await service.get_user(db=db, user_id=str(user_id), principal=caller)
    await tokens.revoke(db=db, user=user, token_id=None)
