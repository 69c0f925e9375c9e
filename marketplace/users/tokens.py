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
principal's ``key_id``, and the principal carries that key's team and limits: its ``end_user``
limits apply to this user, docs/keys.md). A token lives no longer than that key: once the key is no longer one
the gateway accepts for acting on users (``Gateway.key_acts_for_users``: removed from the
configuration or moved to the read keys, a database key revoked or expired), its tokens are
refused (a 503 while the gateway's key store cannot say). The clean-up
(``marketplace.cleanup``) deletes expired and revoked tokens and those of removed keys, a
bounded batch at a time (``delete_dead``, ``delete_issued_by``).
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from datetime import datetime, timedelta

from sqlalchemy import delete, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.api import Principal
from marketplace.database.availability import is_outage
from marketplace.database.tables import utcnow
from marketplace.errors import NotFound
from marketplace.users.models import User, UserToken

TOKEN_PREFIX = "mpu_"
TOKEN_PATHS = ("/api/chat", "/api/users/", "/api/conversations/")
_TOKEN_MAX = 128


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


async def mint(*, db: AsyncSession, user: User, issued_by: Principal, ttl_seconds: int) -> tuple[UserToken, str]:
    """A new token for ``user``: its row and the token itself (shown once, never stored)."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    now = utcnow()
    row = UserToken(id=str(uuid.uuid4()), user_id=user.id, issued_by=issued_by.key_id, token_hash=token_hash(token),
                    created_at=now, expires_at=now + timedelta(seconds=ttl_seconds))
    db.add(row)
    await db.commit()
    return row, token


async def revoke(*, db: AsyncSession, user: User, token_id: str | None) -> int:
    """Revoke one of ``user``'s tokens (404 if it has no such live token), or all when ``token_id`` is None."""
    statement = update(UserToken).where(UserToken.user_id == user.id, UserToken.revoked_at.is_(None))
    if token_id is not None:
        statement = statement.where(UserToken.id == token_id)
    result = await db.execute(statement.values(revoked_at=utcnow()))
    await db.commit()
    if token_id is not None and result.rowcount == 0:
        raise NotFound("token", token_id)
    return result.rowcount


async def delete_dead(*, db: AsyncSession, now: datetime, limit: int) -> int:
    """Delete up to ``limit`` tokens that expired or were revoked; how many went."""
    dead = select(UserToken.id).where(or_(UserToken.expires_at <= now, UserToken.revoked_at.is_not(None)))
    result = await db.execute(delete(UserToken).where(UserToken.id.in_(dead.limit(limit))))
    await db.commit()
    return result.rowcount


async def issuers(*, db: AsyncSession, limit: int) -> list[str]:
    """The key ids that issued the tokens still stored (a handful: one per app or admin key that minted any)."""
    return list((await db.scalars(select(UserToken.issued_by).distinct().limit(limit))).all())


async def delete_issued_by(*, db: AsyncSession, key_ids: list[str], limit: int) -> int:
    """Delete up to ``limit`` tokens minted by these keys; how many went."""
    if not key_ids:
        return 0
    theirs = select(UserToken.id).where(UserToken.issued_by.in_(key_ids))
    result = await db.execute(delete(UserToken).where(UserToken.id.in_(theirs.limit(limit))))
    await db.commit()
    return result.rowcount


class UserTokens:
    """The marketplace's ``gateway.api.TokenAuthenticator``."""

    token_prefix = TOKEN_PREFIX
    path_prefixes = TOKEN_PATHS
    kind = "end-user token"

    def __init__(self, marketplace) -> None:
        self._marketplace = marketplace  # marketplace.lifecycle.Marketplace: its database, once up

    async def authenticate(self, token: str) -> Principal | None:
        if len(token) > _TOKEN_MAX:
            return None
        marketplace = self._marketplace
        try:
            async with marketplace.database()() as db:
                found = (await db.execute(
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
        # The issuing key's limits come with it (its end_user limits for this user); None: the key
        # that minted it was removed, and its tokens went with it.
        return await marketplace.gateway.end_user(issued_by, subject=user_id, token_id=token_id)
