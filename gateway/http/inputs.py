"""Request values the gateway's own tables cannot hold: NUL characters and lone surrogates, refused before any query.

PostgreSQL text refuses a NUL character, whether stored or only compared, and the stores report
the failed statement as the database being unavailable: a 503 with ``Retry-After`` for a request
that can never succeed (SQLite takes it, so only PostgreSQL deployments saw it). A lone surrogate
(JSON's ``"\\ud800"``, which Python's JSON parser lets through) is no text UTF-8 can hold: the
drivers refuse it (a 400 since ``gateway.database.errors``, without the field's name), and one
stored inside JSON (a key's ``models``) made the answer itself fail (a 500, the key created).
The routes of the admin API, files, batches and webhooks refuse both first with a 400 naming the
value: their routers' ``refuse_nul`` for the path and query (Starlette decodes those with
U+FFFD for what is not UTF-8: no surrogate gets through), ``storable_text`` for a body's fields.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from fastapi import Request

from gateway.http.errors import GatewayError

NUL = "\x00"  # what PostgreSQL text cannot hold, stored or compared
LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # what no UTF-8 text can hold


def has_nul(value: Any) -> bool:
    """True if a NUL character hides anywhere in ``value`` (a string, or one inside lists and dicts)."""
    return _any_string(value, lambda text: NUL in text)


def has_lone_surrogate(value: Any) -> bool:
    """True if a string in ``value`` (or inside its lists and dicts) holds a UTF-16 half on its own."""
    return _any_string(value, lambda text: LONE_SURROGATE.search(text) is not None)


def _any_string(value: Any, test: Callable[[str], bool]) -> bool:
    """Whether ``test`` holds for ``value`` if it is a string, or for a string inside its lists and dicts
    (their keys included)."""
    if isinstance(value, str):
        return test(value)
    if isinstance(value, dict):
        return any(_any_string(key, test) or _any_string(item, test) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return any(_any_string(item, test) for item in value)
    return False


def storable_text(value: Any) -> Any:
    """A pydantic field validator: ``field_validator("*")(storable_text)``."""
    if has_nul(value):
        raise ValueError("must not contain NUL characters")
    if has_lone_surrogate(value):
        raise ValueError("must not contain lone surrogates (\\ud800 to \\udfff): they are no text")
    return value


async def refuse_nul(request: Request) -> None:
    """A router dependency: a 400 naming the first path or query parameter that holds a NUL character."""
    for name, value in (*request.path_params.items(), *request.query_params.multi_items()):
        if has_nul(name) or has_nul(value):
            raise GatewayError(400, f"{name}: must not contain NUL characters", param=name)
