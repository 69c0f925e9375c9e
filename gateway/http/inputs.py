"""Request values the gateway's own tables cannot hold: NUL characters, refused before any query.

PostgreSQL text refuses a NUL character, whether stored or only compared, and the stores report
the failed statement as the database being unavailable: a 503 with ``Retry-After`` for a request
that can never succeed (SQLite takes it, so only PostgreSQL deployments saw it). The routes of the
admin API, files, batches and webhooks refuse it first with a 400 naming the value: their
routers' ``refuse_nul`` for the path and query, ``no_nul`` for a body's fields.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request

from gateway.http.errors import GatewayError

NUL = "\x00"  # what PostgreSQL text cannot hold, stored or compared


def has_nul(value: Any) -> bool:
    """True if a NUL character hides anywhere in ``value`` (a string, or one inside lists and dicts)."""
    if isinstance(value, str):
        return NUL in value
    if isinstance(value, dict):
        return any(has_nul(key) or has_nul(item) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return any(has_nul(item) for item in value)
    return False


def no_nul(value: Any) -> Any:
    """A pydantic field validator: ``field_validator("*")(no_nul)``."""
    if has_nul(value):
        raise ValueError("must not contain NUL characters")
    return value


async def refuse_nul(request: Request) -> None:
    """A router dependency: a 400 naming the first path or query parameter that holds a NUL character."""
    for name, value in (*request.path_params.items(), *request.query_params.multi_items()):
        if has_nul(name) or has_nul(value):
            raise GatewayError(400, f"{name}: must not contain NUL characters", param=name)
