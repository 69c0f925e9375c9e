"""API keys: stored hashed, compared in constant time, resolved to a Principal.

Keys come from settings either in clear (hashed at load, the clear text is not
kept) or already hashed as ``sha256:<hex>``. A request's key is hashed and compared
with every stored digest using ``hmac.compare_digest``, so the time taken says nothing
about how close a guess was.

A key arrives as ``Authorization: Bearer <key>`` (OpenAI SDKs, and Anthropic's Python SDK
since 2.x) or as ``x-api-key: <key>`` (Anthropic's own header, which older Anthropic SDKs
and many Anthropic clients send); either authenticates, on every route.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from gateway.config import Settings
from gateway.http.errors import GatewayError


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling. ``key_id`` is a short digest prefix: safe in logs and metric labels."""

    key_id: str
    can_write: bool


LOCAL_PRINCIPAL = Principal(key_id="local", can_write=True)


def hash_key(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def _parse_entry(entry: str) -> bytes:
    if entry.startswith("sha256:"):
        hex_digest = entry.removeprefix("sha256:").strip().lower()
        try:
            digest = bytes.fromhex(hex_digest)
        except ValueError:
            digest = b""
        if len(digest) != 32:
            raise ValueError("a hashed API key must be 'sha256:' followed by 64 hex digits")
        return digest
    return hash_key(entry)


class KeyRing:
    """The configured keys, as digests, with their rights."""

    def __init__(self, *, read_keys: list[str], write_keys: list[str]) -> None:
        entries: list[tuple[bytes, Principal]] = []
        for entry, can_write in [(k, False) for k in read_keys] + [(k, True) for k in write_keys]:
            digest = _parse_entry(entry)
            entries.append((digest, Principal(key_id=digest.hex()[:12], can_write=can_write)))
        self._entries = entries

    @classmethod
    def from_settings(cls, settings: Settings) -> "KeyRing":
        return cls(read_keys=settings.api_keys, write_keys=settings.admin_api_keys)

    @property
    def enabled(self) -> bool:
        return bool(self._entries)

    def authenticate(self, token: str) -> Principal | None:
        """The principal for ``token``, or None. Checks every key (constant time per key)."""
        digest = hash_key(token)
        found: Principal | None = None
        for stored, principal in self._entries:
            if hmac.compare_digest(stored, digest) and (found is None or principal.can_write):
                found = principal
        return found


API_KEY_HEADER = b"x-api-key"
MISSING_KEY = "missing API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'"


def request_keys(authorization: bytes | None, api_key: bytes | None) -> list[str]:
    """The keys a request presents: its bearer token, then its ``x-api-key`` (each only if present)."""
    keys = []
    token = bearer_token(authorization)
    if token is not None:
        keys.append(token)
    if api_key is not None:
        value = api_key.decode("latin-1").strip()
        if value and value != token:
            keys.append(value)
    return keys


def bearer_token(authorization: bytes | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header value."""
    if not authorization:
        return None
    scheme, _, token = authorization.decode("latin-1").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


# Dependencies are ``async def`` on purpose: FastAPI runs plain ``def``
# dependencies in its thread pool, a thread hop per request on the hot path.
async def get_principal(request: Request) -> Principal:
    """The principal the auth middleware attached to this request."""
    principal = request.scope.get("state", {}).get("principal")
    if principal is None:  # a route reached without the middleware (misconfiguration)
        raise GatewayError(401, "missing credentials", code="invalid_api_key")
    return principal


async def require_writer(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
    """The principal, if it may write; 403 otherwise."""
    if not principal.can_write:
        raise GatewayError(403, "this API key may read but not write", code="insufficient_permissions")
    return principal


PrincipalDep = Annotated[Principal, Depends(get_principal)]
WriterDep = Annotated[Principal, Depends(require_writer)]
