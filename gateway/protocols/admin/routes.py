"""The admin API's router: keys, teams, usage (``create_app`` includes it)."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from gateway.http.inputs import refuse_nul
from gateway.protocols.admin.keys import keys_router
from gateway.protocols.admin.teams import teams_router
from gateway.protocols.admin.usage import usage_router
from gateway.relay.end_users import EndUsers
from gateway.tenancy.service import Tenancy

ADMIN_PREFIX = "/admin/"


def admin_router(tenancy: Tenancy, end_users: EndUsers | None = None) -> APIRouter:
    """``end_users``: the request path's labeller (the same secret), so ``?user=`` finds what it recorded."""
    router = APIRouter(dependencies=[Depends(refuse_nul)])
    router.include_router(keys_router(tenancy, default_grace_seconds=tenancy.settings.key_rotation_grace_seconds))
    router.include_router(teams_router(tenancy))
    router.include_router(usage_router(tenancy, end_users))
    return router
