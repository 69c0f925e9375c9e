"""API keys: stored hashed, compared in constant time, resolved to a Principal.

Keys come from settings either in clear (hashed at load, the clear text is not
kept) or already hashed as ``sha256:<hex>``. A request's key is hashed and compared
with every stored digest using ``hmac.compare_digest``, so the time taken says nothing
about how close a guess was.

A key arrives as ``Authorization: Bearer <key>`` (OpenAI SDKs, and Anthropic's Python SDK
since 2.x) or as ``x-api-key: <key>`` (Anthropic's own header, which older Anthropic SDKs
and many Anthropic clients send); either authenticates, on every route.

Roles: an ``API_KEYS`` key (``read``) may use the engine (OpenAI routes, code API) and read the
marketplace catalogue; an ``APP_API_KEYS`` key (``app``) may also act for a feature's end users
(the marketplace's users, their chats and tokens); an ``ADMIN_API_KEYS`` key (``admin``) may
also write the catalogue and reach the engine's admin routes. A feature may issue end-user
tokens (:class:`TokenAuthenticator`): a principal of role ``user``, bound to one end user
(``subject``), accepted only on the paths the feature names. Key ids: ``http.key_ids``.

Keys kept in the database (``gateway.tenancy``, managed through ``/admin/keys``) have the same
three roles plus a team, limits, a priority band and a weight, which their principal carries.
A bearer token of their form (``sk-gw-...``) that is no configured key is looked up through
``DatabaseKeys``, a :class:`TokenAuthenticator` for every path, via the resolver's cache.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Annotated, Literal, Protocol

from fastapi import Depends, Request

from gateway.config import Settings
from gateway.http.context import SCOPE_KEY
from gateway.http.errors import GatewayError
from gateway.http.key_ids import key_id, secret_from_settings
from gateway.tenancy.errors import StoreUnavailable
from gateway.tenancy.ids import KEY_PREFIX
from gateway.tenancy.model import DEFAULT_PRIORITY, DEFAULT_WEIGHT, NO_LIMITS, Limits, ResolvedKey, TeamLimits
from gateway.tenancy.resolver import KeyResolver

Role = Literal["read", "app", "admin", "user"]
_RANK = {"user": 0, "read": 1, "app": 2, "admin": 3}


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling. ``key_id`` (``http.key_ids``) is safe in logs and metric labels.

    An end-user token's principal has role ``user``, the key id of the key that issued the
    token (its requests count against that key's limits) and the end user's id as ``subject``.
    """

    key_id: str
    role: Role
    subject: str | None = None  # role "user": the end user the token was issued for
    token_id: str | None = None  # role "user": the token's id (revocable)
    # A database key's (gateway.tenancy): its team and the team's limits, its own limits, the
    # models it may use (None: all), its priority band and fairness weight. Configured keys:
    # no team, no limits, every model, the standard band.
    team: TeamLimits | None = None
    limits: Limits = NO_LIMITS
    models: tuple[str, ...] | None = None
    priority: str = DEFAULT_PRIORITY
    weight: float = DEFAULT_WEIGHT

    @property
    def team_id(self) -> str | None:
        return self.team.id if self.team is not None else None

    @property
    def can_write(self) -> bool:
        return self.role == "admin"

    @property
    def acts_for_users(self) -> bool:
        """May create and manage a feature's end users and act for them (app and admin keys)."""
        return self.role in ("app", "admin")

    @property
    def is_end_user(self) -> bool:
        return self.role == "user"


LOCAL_PRINCIPAL = Principal(key_id="local", role="admin")


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
    """The configured keys, as digests, with their roles; ``secret`` makes their key ids (``http.key_ids``)."""

    def __init__(self, *, read_keys: list[str], write_keys: list[str], app_keys: list[str] = (),
                 secret: bytes) -> None:
        entries: list[tuple[bytes, Principal]] = []
        roles: list[tuple[str, Role]] = ([(k, "read") for k in read_keys] + [(k, "app") for k in app_keys]
                                         + [(k, "admin") for k in write_keys])
        for entry, role in roles:
            digest = _parse_entry(entry)
            entries.append((digest, Principal(key_id=key_id(digest, secret), role=role)))
        self._entries = entries

    @classmethod
    def from_settings(cls, settings: Settings) -> "KeyRing":
        def revealed(keys) -> list[str]:
            return [key.get_secret_value() for key in keys]

        return cls(read_keys=revealed(settings.api_keys), app_keys=revealed(settings.app_api_keys),
                   write_keys=revealed(settings.admin_api_keys), secret=secret_from_settings(settings))

    @property
    def enabled(self) -> bool:
        return bool(self._entries)

    @property
    def key_ids(self) -> frozenset[str]:
        return frozenset(principal.key_id for _, principal in self._entries)

    @property
    def acting_for_users_ids(self) -> frozenset[str]:
        """The key ids of the app and admin keys: those that may issue and vouch for end users' tokens."""
        return frozenset(principal.key_id for _, principal in self._entries if principal.acts_for_users)

    @property
    def owner_ids(self) -> frozenset[str]:
        """The key ids the requests these keys let in carry: the local principal's when there are none."""
        return self.key_ids if self.enabled else frozenset({LOCAL_PRINCIPAL.key_id})

    def authenticate(self, token: str) -> Principal | None:
        """The principal for ``token``, or None. Checks every key (constant time per key)."""
        digest = hash_key(token)
        found: Principal | None = None
        for stored, principal in self._entries:
            if hmac.compare_digest(stored, digest) and (found is None or _RANK[principal.role] > _RANK[found.role]):
                found = principal
        return found


class TokenAuthenticator(Protocol):
    """End-user tokens a feature issues (the marketplace's ``/api/users/{id}/tokens``).

    The middleware asks it about a bearer token that is no configured key, starts with
    ``token_prefix`` and was sent to a path starting with one of ``path_prefixes``; anywhere
    else such a token is an invalid key (401). ``authenticate`` may raise ``GatewayError``
    (a 503 while the feature's database is down). ``kind`` names its tokens in the 401 of one
    it does not know (``invalid, expired or revoked <kind>``); optional (it came after the
    first features were written): without it the 401 says ``token``.
    """

    token_prefix: str
    path_prefixes: tuple[str, ...]
    kind: str

    async def authenticate(self, token: str) -> Principal | None: ...


def principal_of(key: ResolvedKey) -> Principal:
    """The principal of a database key."""
    return Principal(key_id=key.id, role=key.role, team=key.team, limits=key.limits, models=key.models,
                     priority=key.priority, weight=key.weight)


class DatabaseKeys:
    """Keys kept in the database, as a :class:`TokenAuthenticator` for every path.

    The middleware asks it about a bearer token of the database keys' form that is no
    configured key. The key store being unreachable for a key not in the cache is a 503.
    """

    token_prefix = KEY_PREFIX
    path_prefixes = ("/",)
    kind = "API key"

    def __init__(self, resolver: KeyResolver) -> None:
        self.resolver = resolver

    async def authenticate(self, token: str) -> Principal | None:
        try:
            key = await self.resolver.resolve(token)
        except StoreUnavailable:
            raise GatewayError(503, "the key store is unavailable: this key cannot be checked now, retry shortly",
                               code="key_store_unavailable", headers={"retry-after": "1"})
        return principal_of(key) if key is not None else None


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
async def get_caller(request: Request) -> Principal:
    """The principal the auth middleware attached to this request: an API key's or an end-user token's."""
    context = request.scope.get(SCOPE_KEY)
    principal = context.principal if context is not None else None
    if principal is None:  # a route reached without the middleware (misconfiguration)
        raise GatewayError(401, "missing credentials", code="invalid_api_key")
    return principal


async def get_principal(principal: Annotated[Principal, Depends(get_caller)]) -> Principal:
    """The principal of an API key (any role); an end-user token is refused (401)."""
    if principal.is_end_user:
        raise GatewayError(401, "this route needs an API key, not an end-user token", code="invalid_api_key",
                           headers={"www-authenticate": "Bearer"})
    return principal


def _no_user_data() -> GatewayError:
    return GatewayError(403, "this API key may not reach end users' data: that needs a key from APP_API_KEYS "
                        "or ADMIN_API_KEYS", code="insufficient_permissions")


async def require_app(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
    """The principal, if it may act for end users (an app or admin key); 403 otherwise."""
    if not principal.acts_for_users:
        raise _no_user_data()
    return principal


async def require_user_data(principal: Annotated[Principal, Depends(get_caller)]) -> Principal:
    """An end-user token's principal, or a key that acts for users (403 for a read key)."""
    if not (principal.is_end_user or principal.acts_for_users):
        raise _no_user_data()
    return principal


async def require_writer(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
    """The principal, if it may write; 403 otherwise."""
    if not principal.can_write:
        raise GatewayError(403, "this API key may read but not write", code="insufficient_permissions")
    return principal


PrincipalDep = Annotated[Principal, Depends(get_principal)]
AppDep = Annotated[Principal, Depends(require_app)]
UserDataDep = Annotated[Principal, Depends(require_user_data)]  # what a feature's end users may reach
WriterDep = Annotated[Principal, Depends(require_writer)]
