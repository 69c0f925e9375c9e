"""Search cursors: opaque, signed tokens that say where the next page starts.

A cursor holds the search it continues (the criteria as finally searched, after any
fallback, so page 2 searches exactly what page 1 did), the sort key of the last row shown
(keyset pagination: the next page is "after this key", which costs the same at any depth),
how many rows came before, the total from page 1, a fingerprint of the request that started
it, and whatever the route wants to repeat on later pages. It is JSON, base64url-encoded,
with an HMAC-SHA256 tag (128 bits) by a key kept in the marketplace's own database
(``marketplace_secrets``, created by migration 0003), so every worker and replica accepts
the cursors of the others and nobody can forge or edit one. Deleting that row and
restarting rotates the key; older cursors are then refused.

A cursor is refused (``CursorError``, a 422 naming ``cursor``) when it is malformed, was
signed by another key, comes from another version of this format, or is used with a
request other than the one that started the search.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from marketplace.database.secrets import Secret

VERSION = 1
KEY_NAME = "cursor_signing_key"
TAG_BYTES = 16
MAX_CHARS = 4096


class CursorError(ValueError):
    """A cursor that cannot be used; the message says why."""


@dataclass(frozen=True)
class Cursor:
    fingerprint: str  # of the request that started the search
    criteria: dict[str, Any]
    after: dict[str, Any]  # the sort key of the last row shown
    rows_before: int  # rows on the pages before the next one
    total: int
    total_exact: bool
    fallback: list[str]
    extra: dict[str, Any]


def fingerprint(request: Any) -> str:
    """A short digest of a request's search inputs (any JSON-ready value)."""
    canonical = json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()[:24]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class CursorSigner:
    def __init__(self, key: bytes) -> None:
        self._key = key

    def _tag(self, payload: bytes) -> bytes:
        return hmac.new(self._key, payload, hashlib.sha256).digest()[:TAG_BYTES]

    def encode(self, cursor: Cursor) -> str:
        document = {"v": VERSION, "f": cursor.fingerprint, "c": cursor.criteria, "a": cursor.after,
                    "o": cursor.rows_before, "t": cursor.total, "e": cursor.total_exact,
                    "b": cursor.fallback, "x": cursor.extra}
        payload = json.dumps(document, separators=(",", ":"), ensure_ascii=True).encode()
        return f"{_b64(payload)}.{_b64(self._tag(payload))}"

    def decode(self, token: str, *, fingerprint: str) -> Cursor:
        """The cursor in ``token`` if it is genuine and belongs to the request with ``fingerprint``."""
        if len(token) > MAX_CHARS:
            raise CursorError(f"cursor is longer than {MAX_CHARS} characters: not one this API issued")
        encoded, dot, encoded_tag = token.partition(".")
        try:
            payload, tag = _unb64(encoded), _unb64(encoded_tag)
        except (binascii.Error, ValueError):
            raise CursorError("cursor is not valid: pass next_cursor from a previous page unchanged") from None
        if not dot or not hmac.compare_digest(tag, self._tag(payload)):
            raise CursorError("cursor is not valid: pass next_cursor from a previous page unchanged")
        document = json.loads(payload)
        if document.get("v") != VERSION:
            raise CursorError("cursor comes from another version of the API: start the search again")
        if document["f"] != fingerprint:
            raise CursorError("cursor belongs to another search: send the same query and filters as "
                              "the page that returned it")
        return Cursor(fingerprint=document["f"], criteria=document["c"], after=document["a"],
                      rows_before=document["o"], total=document["t"], total_exact=document["e"],
                      fallback=document["b"], extra=document["x"])


async def load_signer(db_factory: async_sessionmaker[AsyncSession]) -> CursorSigner:
    """The signer with this database's key (created here if the row was deleted)."""
    for _ in range(2):
        async with db_factory() as db:
            value = await db.scalar(select(Secret.value).where(Secret.name == KEY_NAME))
            if value is not None:
                return CursorSigner(value.encode())
            db.add(Secret(name=KEY_NAME, value=secrets.token_urlsafe(32)))
            try:
                await db.commit()
            except IntegrityError:  # another worker created it first: read theirs
                await db.rollback()
    raise RuntimeError("could not read or create the cursor signing key")
