"""Teams and keys in the gateway's database: create, read, change, revoke, rotate, resolve.

Every change raises ``gateway_state.version`` in its own transaction, so a replica that polls
the version (``resolver.KeyResolver``) can never see the change without the new version or
the new version without the change. Database failures leave as ``StoreUnavailable`` (a value the
database cannot hold as ``ValueRefused``: ``errors.from_database``); unknown ids as ``NotFound``.

Rotation: a new secret is issued and the old one gets ``expires_at = now + grace``; both
resolve to the same key (same id, limits, owner of stored data) until then. Rotating again
within the grace ends the older secret at once: a key has at most two valid secrets.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gateway.database.engine import detached
from gateway.database.tables.tenancy import key_secrets, keys, state, teams
from gateway.tenancy import ids
from gateway.tenancy.errors import Conflict, NotFound, from_database
from gateway.tenancy.model import (
    DEFAULT_PRIORITY,
    DEFAULT_WEIGHT,
    Limits,
    ResolvedKey,
    TeamLimits,
    as_utc,
    utcnow,
)
from gateway.tenancy.records import KeyRecord, Page, TeamRecord

MAX_PAGE = 1000


class KeyStore:
    def __init__(self, engine: AsyncEngine, *, clock: Callable[[], dt.datetime] = utcnow) -> None:
        self.engine = engine
        self.clock = clock

    # --- teams -----------------------------------------------------------------------------
    async def create_team(self, *, name: str, limits: Limits, priority: str = DEFAULT_PRIORITY,
                          weight: float = DEFAULT_WEIGHT) -> TeamRecord:
        now = self.clock()
        row = {"id": ids.new_team_id(), "name": name, "limits": _dump_limits(limits), "priority": priority,
               "weight": weight, "created_at": now, "updated_at": now}
        async with self._changing() as db:
            await db.execute(teams.insert().values(**row))
        return _team(row)

    async def get_team(self, team_id: str) -> TeamRecord:
        async with self._reading() as db:
            row = (await db.execute(teams.select().where(teams.c.id == team_id))).mappings().first()
        if row is None:
            raise NotFound("team", team_id)
        return _team(row)

    async def list_teams(self, *, limit: int = 100, after: str | None = None) -> Page:
        query = teams.select().order_by(teams.c.id).limit(min(limit, MAX_PAGE) + 1)
        if after is not None:
            query = query.where(teams.c.id > after)
        async with self._reading() as db:
            rows = (await db.execute(query)).mappings().all()
        return _page([_team(row) for row in rows], limit)

    async def update_team(self, team_id: str, changes: dict[str, Any]) -> TeamRecord:
        values = {name: value for name, value in changes.items() if name in ("name", "priority", "weight")}
        if "limits" in changes:
            values["limits"] = _dump_limits(changes["limits"])
        values["updated_at"] = self.clock()
        async with self._changing() as db:
            done = await db.execute(teams.update().where(teams.c.id == team_id).values(**values))
            if done.rowcount == 0:
                raise NotFound("team", team_id)
        return await self.get_team(team_id)

    async def delete_team(self, team_id: str) -> None:
        """Delete a team that has no active key (its revoked keys are detached from it)."""
        async with self._changing() as db:
            if (await db.execute(sa.select(teams.c.id).where(teams.c.id == team_id))).first() is None:
                raise NotFound("team", team_id)
            active = (await db.execute(sa.select(sa.func.count()).select_from(keys).where(
                keys.c.team_id == team_id, keys.c.revoked_at.is_(None)))).scalar_one()
            if active:
                raise Conflict(f"team {team_id} still has {active} active key(s): revoke them or move them to "
                               "another team first", field="team_id")
            await db.execute(keys.update().where(keys.c.team_id == team_id).values(team_id=None))
            await db.execute(teams.delete().where(teams.c.id == team_id))

    # --- keys ------------------------------------------------------------------------------
    async def create_key(self, *, name: str, role: str, team_id: str | None = None,
                         models: list[str] | None = None, limits: Limits = Limits(), priority: str | None = None,
                         weight: float | None = None, expires_at: dt.datetime | None = None) -> tuple[KeyRecord, str]:
        """A new key and its secret (returned this once, kept only as a digest)."""
        now = self.clock()
        secret = ids.new_secret()
        async with self._changing() as db:
            team = await _require_team(db, team_id) if team_id is not None else None
            # The band and weight are the key's own from now on: the team's at creation, else the defaults.
            priority = priority or (team.priority if team is not None else DEFAULT_PRIORITY)
            weight = weight if weight is not None else (team.weight if team is not None else DEFAULT_WEIGHT)
            row = {"id": ids.new_key_id(), "name": name, "role": role, "team_id": team_id,
                   "models": _dump_models(models), "limits": _dump_limits(limits), "priority": priority,
                   "weight": weight, "prefix": ids.display_prefix(secret), "expires_at": expires_at,
                   "revoked_at": None, "created_at": now, "updated_at": now}
            await db.execute(keys.insert().values(**row))
            await db.execute(key_secrets.insert().values(digest=ids.secret_digest(secret), key_id=row["id"],
                                                         created_at=now, expires_at=None))
        return _key(row), secret

    async def get_key(self, key_id: str) -> KeyRecord:
        async with self._reading() as db:
            return await self._get_key(db, key_id)

    async def _get_key(self, db: AsyncConnection, key_id: str) -> KeyRecord:
        row = (await db.execute(keys.select().where(keys.c.id == key_id))).mappings().first()
        if row is None:
            raise NotFound("key", key_id)
        grace = (await db.execute(sa.select(sa.func.max(key_secrets.c.expires_at)).where(
            key_secrets.c.key_id == key_id, key_secrets.c.expires_at.is_not(None)))).scalar_one()
        grace = as_utc(grace)
        return _key(row, previous_secret_expires_at=grace if grace is not None and grace > self.clock() else None)

    async def list_keys(self, *, limit: int = 100, after: str | None = None, team_id: str | None = None,
                        include_revoked: bool = False) -> Page:
        query = keys.select().order_by(keys.c.id).limit(min(limit, MAX_PAGE) + 1)
        if after is not None:
            query = query.where(keys.c.id > after)
        if team_id is not None:
            query = query.where(keys.c.team_id == team_id)
        if not include_revoked:
            query = query.where(keys.c.revoked_at.is_(None))
        async with self._reading() as db:
            rows = (await db.execute(query)).mappings().all()
        return _page([_key(row) for row in rows], limit)

    async def update_key(self, key_id: str, changes: dict[str, Any]) -> KeyRecord:
        values = {name: value for name, value in changes.items()
                  if name in ("name", "role", "team_id", "priority", "weight", "expires_at")}
        if "limits" in changes:
            values["limits"] = _dump_limits(changes["limits"])
        if "models" in changes:
            values["models"] = _dump_models(changes["models"])
        values["updated_at"] = self.clock()
        async with self._changing() as db:
            if values.get("team_id") is not None:
                await _require_team(db, values["team_id"])
            done = await db.execute(keys.update().where(keys.c.id == key_id, keys.c.revoked_at.is_(None))
                                    .values(**values))
            if done.rowcount == 0:
                await self._get_key(db, key_id)  # NotFound if unknown
                raise Conflict(f"key {key_id} is revoked: it can no longer be changed")
        return await self.get_key(key_id)

    async def revoke_key(self, key_id: str) -> KeyRecord:
        """Revoke a key (every secret of it); revoking twice keeps the first time."""
        now = self.clock()
        async with self._changing() as db:
            await db.execute(keys.update().where(keys.c.id == key_id, keys.c.revoked_at.is_(None))
                             .values(revoked_at=now, updated_at=now))
            record = await self._get_key(db, key_id)
        return record

    async def rotate_key(self, key_id: str, *, grace: dt.timedelta) -> tuple[KeyRecord, str]:
        """A new secret for the key; its current one stays valid for ``grace``, any older one ends now."""
        now = self.clock()
        secret = ids.new_secret()
        async with self._changing() as db:
            record = await self._get_key(db, key_id)
            if record.revoked_at is not None:
                raise Conflict(f"key {key_id} is revoked: it cannot be rotated")
            await db.execute(key_secrets.delete().where(key_secrets.c.key_id == key_id,
                                                        key_secrets.c.expires_at.is_not(None)))
            await db.execute(key_secrets.update().where(key_secrets.c.key_id == key_id)
                             .values(expires_at=now + grace))
            if grace <= dt.timedelta(0):
                await db.execute(key_secrets.delete().where(key_secrets.c.key_id == key_id))
            await db.execute(key_secrets.insert().values(digest=ids.secret_digest(secret), key_id=key_id,
                                                         created_at=now, expires_at=None))
            await db.execute(keys.update().where(keys.c.id == key_id)
                             .values(prefix=ids.display_prefix(secret), updated_at=now))
            record = await self._get_key(db, key_id)
        return record, secret

    # --- resolution ------------------------------------------------------------------------
    # The reads a request waits for (its key), under deadlines of their callers (``resolver``,
    # ``gateway.api``): ``detached``, so a cancelled read's connection clean-up does not stretch them.
    async def resolve(self, digest: str) -> ResolvedKey | None:
        """The key whose secret has this digest, if it is not revoked (expiry is checked at use)."""
        return await detached(self._resolve(digest))

    async def resolve_id(self, key_id: str) -> ResolvedKey | None:
        """The key ``key_id`` as its requests see it (team, limits), if it is not revoked; for what it issued.

        A feature's end-user tokens count against the key that issued them (the marketplace's).
        """
        return await detached(self._resolve_id(key_id))

    async def version(self) -> int:
        """The version counter every change raises (what each replica polls)."""
        return await detached(self._version())

    async def _resolve(self, digest: str) -> ResolvedKey | None:
        query = (sa.select(keys, key_secrets.c.expires_at.label("secret_expires_at"), *_TEAM_COLUMNS)
                 .select_from(key_secrets.join(keys, keys.c.id == key_secrets.c.key_id)
                              .outerjoin(teams, teams.c.id == keys.c.team_id))
                 .where(key_secrets.c.digest == digest, keys.c.revoked_at.is_(None)))
        async with self._reading() as db:
            row = (await db.execute(query)).mappings().first()
        return _resolved(row, as_utc(row["secret_expires_at"])) if row is not None else None

    async def _resolve_id(self, key_id: str) -> ResolvedKey | None:
        query = (sa.select(keys, *_TEAM_COLUMNS).select_from(keys.outerjoin(teams, teams.c.id == keys.c.team_id))
                 .where(keys.c.id == key_id, keys.c.revoked_at.is_(None)))
        async with self._reading() as db:
            row = (await db.execute(query)).mappings().first()
        return _resolved(row, None) if row is not None else None

    async def _version(self) -> int:
        async with self._reading() as db:
            return (await db.execute(sa.select(state.c.version).where(state.c.id == 1))).scalar_one()

    # --- transactions ----------------------------------------------------------------------
    def _reading(self):
        return _transaction(self.engine, bump=False)

    def _changing(self):
        return _transaction(self.engine, bump=True)


@contextlib.asynccontextmanager
async def _transaction(engine: AsyncEngine, *, bump: bool) -> AsyncIterator[AsyncConnection]:
    """One transaction; a changing one raises the version before it commits. DB errors: StoreUnavailable."""
    try:
        async with engine.begin() as db:
            yield db
            if bump:
                await db.execute(state.update().where(state.c.id == 1).values(version=state.c.version + 1))
    except Exception as exc:
        failure = from_database(exc)
        if failure is None:
            raise
        raise failure from exc


async def _require_team(db: AsyncConnection, team_id: str):
    row = (await db.execute(sa.select(teams.c.priority, teams.c.weight).where(teams.c.id == team_id))).first()
    if row is None:
        raise NotFound("team", team_id)
    return row


_TEAM_COLUMNS = (teams.c.limits.label("team_limits"), teams.c.priority.label("team_priority"),
                 teams.c.weight.label("team_weight"))


def _resolved(row, secret_expires_at: dt.datetime | None) -> ResolvedKey:
    team = TeamLimits(row["team_id"], _load_limits(row["team_limits"])) if row["team_id"] is not None else None
    return ResolvedKey(
        id=row["id"], name=row["name"], role=row["role"], team=team, models=_load_models(row["models"]),
        limits=_load_limits(row["limits"]),
        priority=row["priority"] or row["team_priority"] or DEFAULT_PRIORITY,
        weight=_first(row["weight"], row["team_weight"], DEFAULT_WEIGHT),
        expires_at=as_utc(row["expires_at"]), secret_expires_at=secret_expires_at)


def _page(items: list, limit: int) -> Page:
    limit = min(limit, MAX_PAGE)
    if len(items) > limit:
        return Page(items[:limit], items[limit - 1].id)
    return Page(items, None)


def _first(*values):
    return next(value for value in values if value is not None)


def _dump_limits(limits: Limits) -> str:
    return limits.model_dump_json(exclude_none=True)


def _load_limits(text: str | None) -> Limits:
    return Limits.model_validate_json(text) if text else Limits()


def _dump_models(models: list[str] | tuple[str, ...] | None) -> str | None:
    return None if models is None else json.dumps(list(models))


def _load_models(text: str | None) -> tuple[str, ...] | None:
    return None if text is None else tuple(json.loads(text))


def _team(row) -> TeamRecord:
    return TeamRecord(id=row["id"], name=row["name"], limits=_load_limits(row["limits"]), priority=row["priority"],
                      weight=row["weight"], created_at=as_utc(row["created_at"]), updated_at=as_utc(row["updated_at"]))


def _key(row, *, previous_secret_expires_at: dt.datetime | None = None) -> KeyRecord:
    return KeyRecord(id=row["id"], name=row["name"], role=row["role"], team_id=row["team_id"],
                     models=_load_models(row["models"]), limits=_load_limits(row["limits"]),
                     priority=row["priority"], weight=row["weight"], prefix=row["prefix"],
                     expires_at=as_utc(row["expires_at"]), revoked_at=as_utc(row["revoked_at"]),
                     created_at=as_utc(row["created_at"]), updated_at=as_utc(row["updated_at"]),
                     previous_secret_expires_at=previous_secret_expires_at)
