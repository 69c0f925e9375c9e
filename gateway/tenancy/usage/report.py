"""The ledger's sums over a time range, grouped by key, team, model, end user or day.

Rows are hourly, so ``from`` and ``to`` are taken to the hour: the hours that overlap
``[from, to)`` (``from`` rounded down, ``to`` up; ``to`` itself is excluded, as OpenAI's usage
API excludes its ``end_time``, so consecutive ranges such as one month's and the next never
count the hour they share; an instant, ``from`` = ``to``, is its own hour). Grouping by day is done here from the hourly
sums (UTC days), the same on SQLite and PostgreSQL.
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.database.tables.tenancy import usage
from gateway.tenancy.errors import from_database
from gateway.tenancy.model import as_utc

GroupBy = Literal["key", "team", "model", "user", "day", "route"]
COLUMNS = {"key": usage.c.key_id, "team": usage.c.team_id, "model": usage.c.model, "user": usage.c.end_user,
           "day": usage.c.hour, "route": usage.c.route}
NAMES = {"key": "key_id", "team": "team_id", "model": "model", "user": "end_user", "day": "day", "route": "route"}
SUMS = ("requests", "prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens", "cost")


def hour_floor(moment: dt.datetime) -> dt.datetime:
    return moment.astimezone(dt.UTC).replace(minute=0, second=0, microsecond=0)


def last_hour(start: dt.datetime, end: dt.datetime) -> dt.datetime:
    """The last hour that begins before ``end`` (``end`` excluded), or ``end``'s own for an instant."""
    last = hour_floor(end)
    return last - dt.timedelta(hours=1) if last == end and end > start else last


async def usage_report(engine: AsyncEngine, *, start: dt.datetime, end: dt.datetime, group_by: GroupBy,
                       key_id: str | None = None, team_id: str | None = None,
                       end_user: str | None = None) -> list[dict]:
    """Sums per group over [start, end) (whole hours), optionally of one key, team or end user (its label);
    largest first."""
    column = COLUMNS[group_by]
    query = (sa.select(column.label("group"), *[sa.func.sum(getattr(usage.c, name)).label(name) for name in SUMS])
             .where(usage.c.hour >= hour_floor(start), usage.c.hour <= last_hour(start, end))
             .group_by(column))
    if key_id is not None:
        query = query.where(usage.c.key_id == key_id)
    if team_id is not None:
        query = query.where(usage.c.team_id == team_id)
    if end_user is not None:
        query = query.where(usage.c.end_user == end_user)
    try:
        async with engine.connect() as db:
            rows = (await db.execute(query)).mappings().all()
    except Exception as exc:
        failure = from_database(exc)
        if failure is None:
            raise
        raise failure from exc
    groups: dict[object, dict] = {}
    for row in rows:
        group = row["group"]
        if group_by == "day":
            group = as_utc(group).date().isoformat()
        elif group_by in ("team", "user") and group == "":
            group = None
        entry = groups.setdefault(group, {NAMES[group_by]: group} | {name: 0 for name in SUMS})
        for name in SUMS:  # PostgreSQL sums integers as numeric (Decimal)
            entry[name] += float(row[name] or 0) if name == "cost" else int(row[name] or 0)
    result = list(groups.values())
    for entry in result:
        entry["total_tokens"] = entry["prompt_tokens"] + entry["completion_tokens"]
        entry["cost"] = round(entry["cost"], 9)
    key = (lambda entry: entry["day"]) if group_by == "day" else (lambda entry: (-entry["total_tokens"],
                                                                                 str(entry[NAMES[group_by]])))
    return sorted(result, key=key)
