"""``GET /admin/usage`` (everyone's, grouped) and ``GET /v1/usage`` (the calling key's own).

``from`` and ``to`` are ISO 8601 times or Unix seconds (default: the last 30 days up to now);
the ledger is hourly: the hours overlapping ``[from, to)`` (``to`` excluded, as OpenAI's
``end_time``: ``usage.report``). Figures reach the database every
``USAGE_FLUSH_SECONDS``, so the last seconds may not be in them yet.

End users are kept as labels (``relay.end_users``: an HMAC of the id, never the id): grouped by
``user`` the rows name labels; ``user=<id>`` (the id the app sends in ``user``, or a
marketplace user's id) selects that end user's rows, labelled here the way the ledger does.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated

from fastapi import APIRouter, Query

from gateway.http.auth import PrincipalDep, WriterDep
from gateway.protocols.admin.errors import invalid, mapped
from gateway.relay.end_users import EndUsers
from gateway.tenancy.model import as_utc
from gateway.tenancy.service import Tenancy
from gateway.tenancy.usage.report import GroupBy, usage_report

DEFAULT_RANGE = dt.timedelta(days=30)
EARLIEST = dt.datetime.min.replace(tzinfo=dt.UTC)
From = Annotated[dt.datetime | None, Query(alias="from", description="start (ISO 8601 or Unix seconds)")]
To = Annotated[dt.datetime | None, Query(alias="to", description="end (ISO 8601 or Unix seconds)")]
User = Annotated[str | None, Query(alias="user", max_length=4096,
                                   description="only this end user's usage (its id as the app sends it)")]


def _range(start: dt.datetime | None, end: dt.datetime | None) -> tuple[dt.datetime, dt.datetime]:
    end = _utc(end, "to") if end is not None else dt.datetime.now(dt.UTC)
    # (max: a default start before the calendar's first moment would overflow; it starts there instead)
    start = _utc(start, "from") if start is not None else max(end, EARLIEST + DEFAULT_RANGE) - DEFAULT_RANGE
    if start > end:
        raise invalid("from", "must not be after to")
    return start, end


def _utc(moment: dt.datetime, field: str) -> dt.datetime:
    try:
        return as_utc(moment)
    except ValueError as exc:  # (beyond the calendar in UTC)
        raise invalid(field, str(exc)) from None


def _answer(rows: list[dict], start: dt.datetime, end: dt.datetime, group_by: str) -> dict:
    return {"object": "usage", "from": int(start.timestamp()), "to": int(end.timestamp()), "group_by": group_by,
            "data": rows}


def usage_router(tenancy: Tenancy, end_users: EndUsers | None = None) -> APIRouter:
    router = APIRouter(tags=["admin"])
    labels = end_users or EndUsers()

    def label(user: str | None) -> str | None:
        return labels.label_of(user) if user else None

    @router.get("/admin/usage", summary="Usage of every key, grouped by key, team, model, user, day or route")
    async def all_usage(_: WriterDep, start: From = None, end: To = None, group_by: GroupBy = "key",
                        key_id: str | None = None, team_id: str | None = None, user: User = None) -> dict:
        start, end = _range(start, end)
        with mapped():
            tenancy.require_ready()
            rows = await usage_report(tenancy.engine, start=start, end=end, group_by=group_by, key_id=key_id,
                                      team_id=team_id, end_user=label(user))
        return _answer(rows, start, end, group_by)

    @router.get("/v1/usage", summary="The calling key's own usage, grouped by model, day, user or route")
    async def own_usage(principal: PrincipalDep, start: From = None, end: To = None,
                        group_by: GroupBy = "model", user: User = None) -> dict:
        if group_by in ("key", "team"):
            raise invalid("group_by", "a key's own usage is grouped by model, day, user or route")
        start, end = _range(start, end)
        with mapped():
            tenancy.require_ready()
            rows = await usage_report(tenancy.engine, start=start, end=end, group_by=group_by,
                                      key_id=principal.key_id, end_user=label(user))
        return _answer(rows, start, end, group_by)

    return router
