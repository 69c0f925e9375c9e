"""Budget periods in Python, for the in-process limiter: the same labels and ends as calendar.lua."""

from __future__ import annotations

import datetime as dt

DAY = 86400


def period_label(period: str | None, second: int) -> str:
    if period == "day":
        return f"d{second // DAY}"
    if period == "month":
        moment = dt.datetime.fromtimestamp(second, dt.UTC)
        return f"m{moment.year}-{moment.month}"
    return "t"


def period_end(period: str | None, second: int) -> int | None:
    """When the period of ``second`` ends (seconds since the epoch); None: never."""
    if period == "day":
        return (second // DAY + 1) * DAY
    if period == "month":
        moment = dt.datetime.fromtimestamp(second, dt.UTC)
        year, month = (moment.year + 1, 1) if moment.month == 12 else (moment.year, moment.month + 1)
        return int(dt.datetime(year, month, 1, tzinfo=dt.UTC).timestamp())
    return None
