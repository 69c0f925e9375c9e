"""The admin API of webhook endpoints (``/admin/webhooks``): admin keys only; the secret is shown once."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field, field_validator

from gateway.http.auth import WriterDep
from gateway.http.inputs import refuse_nul, storable_text
from gateway.http.listing import DEFAULT_LIMIT, limit_param, list_json
from gateway.webhooks.endpoints import Endpoints

PREFIX = "/admin/webhooks"
TAGS = ["Webhooks (admin)"]
Limit = limit_param("webhook endpoints")


class EndpointIn(BaseModel):
    model_config = ConfigDict(extra="forbid")  # as the admin API's bodies: a misspelt field must not pass unseen

    url: str = Field(max_length=2048)
    events: list[str] | None = None  # default: every event
    key_id: str | None = Field(None, max_length=64)  # whose batches and responses
    team_id: str | None = Field(None, max_length=64)  # reserved for teams
    description: str | None = Field(None, max_length=255)

    _storable = field_validator("*")(storable_text)


def webhooks_router(endpoints: Endpoints) -> APIRouter:
    router = APIRouter(prefix=PREFIX, tags=TAGS, dependencies=[Depends(refuse_nul)])

    @router.post("", summary="Register a webhook endpoint (its signing secret is in this answer only)")
    async def create(body: EndpointIn, _: WriterDep) -> dict:
        return await endpoints.create(url=body.url, events=body.events, key_id=body.key_id, team_id=body.team_id,
                                      description=body.description)

    @router.get("", summary="List webhook endpoints, oldest id first")
    async def list_endpoints(_: WriterDep, limit: Limit = DEFAULT_LIMIT, after: str | None = None,
                             key_id: str | None = None) -> dict:
        shown, has_more = await endpoints.list(limit=limit, after=after, key_id=key_id)
        return list_json(shown, has_more=has_more)

    @router.get("/{webhook_id}", summary="Retrieve a webhook endpoint")
    async def retrieve(webhook_id: str, _: WriterDep) -> dict:
        return await endpoints.get(webhook_id)

    @router.get("/{webhook_id}/deliveries", summary="The endpoint's latest deliveries and their attempts")
    async def deliveries(webhook_id: str, _: WriterDep) -> dict:
        return {"object": "list", "data": await endpoints.deliveries(webhook_id)}

    @router.delete("/{webhook_id}", summary="Delete a webhook endpoint")
    async def delete(webhook_id: str, _: WriterDep) -> dict:
        return await endpoints.delete(webhook_id)

    return router
