"""The admin API's lists (keys, teams, webhook endpoints): one paging rule, one answer shape (also
the models list's, ``GET /v1/models``: one page, which OpenAI's and Anthropic's SDKs both read).

Ordered by id; ``after`` an id (the page starts after it, whether or not it still exists);
``limit`` 1 to ``MAX_LIMIT`` items (``DEFAULT_LIMIT`` when not given); the answer OpenAI's list
``{"object": "list", "data", "first_id", "last_id", "has_more"}``. (The OpenAI-compatible lists of
files and batches page as OpenAI does instead, newest first: ``gateway.jobs.paging``.)
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query

MAX_LIMIT = 1000
DEFAULT_LIMIT = 100


def limit_param(items: str) -> Any:
    """The ``limit`` query parameter of a list of ``items``."""
    return Annotated[int, Query(ge=1, le=MAX_LIMIT, description=f"{items} per page")]


def list_json(items: list[dict], *, has_more: bool) -> dict:
    return {"object": "list", "data": items, "first_id": items[0]["id"] if items else None,
            "last_id": items[-1]["id"] if items else None, "has_more": has_more}
