"""End-user tokens: what a browser or mobile client holds instead of an API key.

An app or admin key mints one for one of its users (``POST /api/users/{id}/tokens``) and hands
it to that user's client. The client sends it as ``Authorization: Bearer <token>``; the gateway's
middleware asks :class:`UserTokens` about it on the marketplace's end-user paths only
(``TOKEN_PATHS``: its own profile, its own conversations, ``/api/chat`` as itself), anywhere else
it is an invalid key (401). A token is ``mpu_`` and 43 random URL-safe characters (256 bits);
the database keeps only its SHA-256 (no salt needed for a random value of that size, and a hash
lookup is then one indexed read, shared by every worker and replica and kept across restarts).
It expires (a day at most, an hour by default) and can be revoked one by one or all at once;
its requests count against the limits of the key that minted it (that key's id is the token
principal's ``key_id``).
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from datetime import timedelta

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.api import Principal
from marketplace.availability import is_outage
from marketplace.errors import NotFound
from marketplace.models import User, UserToken, utcnow

TOKEN_PREFIX = "mpu_"
TOKEN_PATHS = ("/api/chat", "/api/users/", "/api/conversations/")
_TOKEN_MAX = 128


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


async def mint(*, session: AsyncSession, user: User, issued_by: Principal, ttl_seconds: int) -> tuple[UserToken, str]:
    """A new token for ``user``: its row and the token itself (shown once, never stored)."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    now = utcnow()
    row = UserToken(id=str(uuid.uuid4()), user_id=user.id, issued_by=issued_by.key_id, token_hash=token_hash(token),
                    created_at=now, expires_at=now + timedelta(seconds=ttl_seconds))
    session.add(row)
    await session.commit()
    return row, token


async def revoke(*, session: AsyncSession, user: User, token_id: str | None) -> int:
    """Revoke one of ``user``'s tokens (404 if it has no such live token), or all when ``token_id`` is None."""
    statement = update(UserToken).where(UserToken.user_id == user.id, UserToken.revoked_at.is_(None))
    if token_id is not None:
        statement = statement.where(UserToken.id == token_id)
    result = await session.execute(statement.values(revoked_at=utcnow()))
    await session.commit()
    if token_id is not None and result.rowcount == 0:
        raise NotFound("token", token_id)
    return result.rowcount


class UserTokens:
    """The marketplace's ``gateway.api.TokenAuthenticator``."""

    token_prefix = TOKEN_PREFIX
    path_prefixes = TOKEN_PATHS

    def __init__(self, marketplace) -> None:
        self._marketplace = marketplace  # marketplace.lifecycle.Marketplace: its database, once up

    async def authenticate(self, token: str) -> Principal | None:
        if len(token) > _TOKEN_MAX:
            return None
        marketplace = self._marketplace
        try:
            async with marketplace.database()() as session:
                found = (await session.execute(
                    select(UserToken.id, UserToken.issued_by, User.public_id)
                    .join(User, UserToken.user_id == User.id)
                    .where(UserToken.token_hash == token_hash(token), UserToken.revoked_at.is_(None),
                           UserToken.expires_at > utcnow())
                )).first()
        except Exception as exc:
            if not is_outage(exc):
                raise
            marketplace.availability.failed(exc)
            raise marketplace.availability.unavailable() from exc
        if found is None:
            return None
        token_id, issued_by, user_id = found
        return Principal(key_id=issued_by, role="user", subject=user_id, token_id=token_id)
