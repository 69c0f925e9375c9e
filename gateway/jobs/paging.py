"""Cursor paging as OpenAI and Anthropic do it: ``after`` an object's id, ``limit``, ``order`` by creation."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.http.errors import GatewayError

MAX_LIMIT = 100


@dataclass(frozen=True)
class Page:
    after: str | None
    limit: int
    descending: bool


def page(*, after: str | None, limit: int | None, order: str | None, default_limit: int = 20,
         max_limit: int = MAX_LIMIT, after_name: str = "after") -> Page:
    if limit is None:
        limit = default_limit
    if not 1 <= limit <= max_limit:
        raise GatewayError(400, f"limit must be between 1 and {max_limit}", param="limit")
    if order not in (None, "asc", "desc"):
        raise GatewayError(400, "order must be 'asc' or 'desc'", param="order")
    if after is not None and not after:
        raise GatewayError(400, f"{after_name} must not be empty", param=after_name)
    return Page(after=after, limit=limit, descending=order != "asc")
