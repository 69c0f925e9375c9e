"""``/admin/keys``: create (the secret shown once), list (paged), read, change, revoke, rotate."""

from __future__ import annotations

import datetime as dt

from fastapi import APIRouter

from gateway.http.auth import WriterDep
from gateway.http.listing import DEFAULT_LIMIT, limit_param, list_json
from gateway.protocols.admin.errors import invalid, mapped
from gateway.protocols.admin.schemas import KeyCreate, KeyUpdate, Rotation, changes, key_json
from gateway.tenancy.service import Tenancy

Limit = limit_param("keys")


def keys_router(tenancy: Tenancy, *, default_grace_seconds: float) -> APIRouter:
    router = APIRouter(prefix="/admin/keys", tags=["admin"])
    store = tenancy.store

    @router.post("", status_code=201, summary="Create a key (its secret is in this answer only)")
    async def create(body: KeyCreate, _: WriterDep) -> dict:
        with mapped():
            tenancy.require_ready()
            record, secret = await store.create_key(**body.model_dump(exclude={"limits"}), limits=body.limits)
            await tenancy.changed()
        return key_json(record, secret=secret)

    @router.get("", summary="List keys (never their secrets), oldest id first")
    async def list_keys(_: WriterDep, limit: Limit = DEFAULT_LIMIT, after: str | None = None,
                        team_id: str | None = None, include_revoked: bool = False) -> dict:
        with mapped():
            tenancy.require_ready()
            page = await store.list_keys(limit=limit, after=after, team_id=team_id, include_revoked=include_revoked)
        return list_json([key_json(record) for record in page.items], has_more=page.next_after is not None)

    @router.get("/{key_id}", summary="One key")
    async def get(key_id: str, _: WriterDep) -> dict:
        with mapped():
            tenancy.require_ready()
            return key_json(await store.get_key(key_id))

    @router.patch("/{key_id}", summary="Change a key's name, role, team, models, limits, priority, weight, expiry")
    async def update(key_id: str, body: KeyUpdate, _: WriterDep) -> dict:
        try:
            sent = changes(body)
        except ValueError as exc:
            raise invalid(str(exc), "may not be null")
        with mapped():
            tenancy.require_ready()
            record = await store.update_key(key_id, sent)
            await tenancy.changed()
        return key_json(record)

    @router.delete("/{key_id}", summary="Revoke a key: refused on every replica within a second")
    async def revoke(key_id: str, _: WriterDep) -> dict:
        with mapped():
            tenancy.require_ready()
            record = await store.revoke_key(key_id)
            await tenancy.changed()
        return key_json(record) | {"deleted": True}

    @router.post("/{key_id}/rotate", summary="A new secret; the old one works for the grace period")
    async def rotate(key_id: str, _: WriterDep, body: Rotation | None = None) -> dict:
        grace = body.grace_seconds if body is not None and body.grace_seconds is not None else default_grace_seconds
        with mapped():
            tenancy.require_ready()
            record, secret = await store.rotate_key(key_id, grace=dt.timedelta(seconds=grace))
            await tenancy.changed()
        return key_json(record, secret=secret)

    return router
