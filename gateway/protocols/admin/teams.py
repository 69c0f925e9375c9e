"""``/admin/teams``: a team's limits are shared by its keys; each key's own apply within them."""

from __future__ import annotations

from fastapi import APIRouter

from gateway.http.auth import WriterDep
from gateway.http.listing import DEFAULT_LIMIT, limit_param, list_json
from gateway.protocols.admin.errors import invalid, mapped
from gateway.protocols.admin.schemas import TeamCreate, TeamUpdate, changes, team_json
from gateway.tenancy.service import Tenancy

Limit = limit_param("teams")


def teams_router(tenancy: Tenancy) -> APIRouter:
    router = APIRouter(prefix="/admin/teams", tags=["admin"])
    store = tenancy.store

    @router.post("", status_code=201, summary="Create a team")
    async def create(body: TeamCreate, _: WriterDep) -> dict:
        with mapped():
            tenancy.require_ready()
            return team_json(await store.create_team(name=body.name, limits=body.limits, priority=body.priority,
                                                     weight=body.weight))

    @router.get("", summary="List teams, oldest id first")
    async def list_teams(_: WriterDep, limit: Limit = DEFAULT_LIMIT, after: str | None = None) -> dict:
        with mapped():
            tenancy.require_ready()
            page = await store.list_teams(limit=limit, after=after)
        return list_json([team_json(record) for record in page.items], has_more=page.next_after is not None)

    @router.get("/{team_id}", summary="One team")
    async def get(team_id: str, _: WriterDep) -> dict:
        with mapped():
            tenancy.require_ready()
            return team_json(await store.get_team(team_id))

    @router.patch("/{team_id}", summary="Change a team's name, limits, priority or weight")
    async def update(team_id: str, body: TeamUpdate, _: WriterDep) -> dict:
        try:
            sent = changes(body)
        except ValueError as exc:
            raise invalid(str(exc), "may not be null")
        with mapped():
            tenancy.require_ready()
            record = await store.update_team(team_id, sent)
            await tenancy.changed()
        return team_json(record)

    @router.delete("/{team_id}", summary="Delete a team that has no active key")
    async def delete(team_id: str, _: WriterDep) -> dict:
        with mapped():
            tenancy.require_ready()
            await store.delete_team(team_id)
            await tenancy.changed()
        return {"object": "team", "id": team_id, "deleted": True}

    return router
