"""The public gateway API for features: everything a feature package may use, and nothing else.

A feature (``marketplace``, ``playground``, ...) is built by its entry point's factory from a
:class:`Gateway` (see ``gateway.features``) and returns a :class:`Feature`. Through the
``Gateway`` it can call the engine, stream a chat completion to a client through the
gateway's one streaming path (resumable sessions when they are on), and read the
generation defaults; its routes use the auth dependencies below, raise ``GatewayError``
(rendered as ``{"detail": ...}`` outside the OpenAI paths) and may catch the engine errors
(``Failure`` is what every error of the gateway is: the engine errors, ``GatewayError``).
Import-linter keeps features to this module.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
from typing import Protocol

from fastapi import APIRouter
from pydantic_settings import BaseSettings
from starlette.requests import Request
from starlette.responses import Response

from gateway.config import Settings, is_loopback, sqlite_database
from gateway.core import Core
from gateway.database.engine import configure_sqlite_connection
from gateway.database.engine import dispose as dispose_database_engine
from gateway.database.migrations.runner import ALEMBIC_LOCK
from gateway.engines.errors import BadGateway, EngineError, EngineHTTPError, EngineTimeout, EngineUnavailable
from gateway.failures import Failure
from gateway.http.auth import (
    LOCAL_PRINCIPAL,
    AppDep,
    KeyRing,
    Principal,
    PrincipalDep,
    TokenAuthenticator,
    UserDataDep,
    WriterDep,
    principal_of,
)
from gateway.http.context import SCOPE_KEY, current_request, request_context
from gateway.http.disconnect import unless_client_leaves
from gateway.http.errors import GatewayError
from gateway.http.queueing import QueueRefusal
from gateway.protocols.openai.routes import OpenAIRelay
from gateway.relay.call import CompletionHook
from gateway.relay.dialect import StreamResult
from gateway.relay.metering import MeteredEngines
from gateway.sessions.ids import (
    SESSION_ID_MAX,
    SESSION_ID_PATTERN,
    SESSION_ID_RULE,
    ResumePoint,
    is_valid_session_id,
    parse_last_event_id,
    resume_value,
)
from gateway.tenancy.errors import StoreUnavailable
from gateway.tenancy.ids import KEY_ID
from gateway.tenancy.resolver import LOOKUP_TIMEOUT_SECONDS
from gateway.tenancy.store import KeyStore

__all__ = [
    "ALEMBIC_LOCK", "AppDep", "BadGateway", "TokenAuthenticator", "UserDataDep",
    "CompletionHook", "configure_sqlite_connection", "dispose_database_engine", "EngineError", "EngineHTTPError",
    "EngineTimeout", "EngineUnavailable",
    "Failure", "Feature", "Gateway", "GatewayError", "Principal", "PrincipalDep", "QueueRefusal", "SESSION_ID_MAX",
    "SESSION_ID_PATTERN", "SESSION_ID_RULE", "Settings", "StreamResult", "WriterDep", "is_loopback",
    "ResumePoint", "is_valid_session_id", "last_event_id", "request_id", "resume_point", "sqlite_database",
    "unless_client_leaves",
]


class Feature(Protocol):
    """What a feature's entry point builds. The entry point names a factory called with the
    :class:`Gateway` (usually the feature's class); its ``settings_class`` attribute is the
    pydantic-settings class of the environment variables the feature reads. A feature may
    also have ``public_paths`` (a frozenset of exact paths it serves without an API key, such
    as the playground's files); every other path needs a key when the gateway has keys, or
    the feature's own end-user token: a feature with a ``token_authenticator``
    (``gateway.http.auth.TokenAuthenticator``) has its tokens accepted on the paths it names, and
    ``queued_paths`` (a frozenset of POST paths whose requests call the engine through
    :class:`Gateway`): with flow control on they wait their turn over ``MAX_INFLIGHT`` in its queue
    like the engine API's, instead of being refused at once by the in-flight caps."""

    name: str
    settings: BaseSettings    # the feature's own settings (its environment variables)
    router: APIRouter | None  # its routes, included after the gateway's own

    async def start(self) -> None: ...
    async def stop(self) -> None: ...

    def status(self) -> dict:
        """``{"ready": bool, ...}``: whether the feature can serve now (shown under ``features`` in
        ``/health`` and ``/readyz``; a feature that is not ready leaves ``/readyz`` at 200: the
        gateway still serves, and the feature answers its own routes meanwhile, with 503s)."""


class Gateway:
    """What a feature is given at assembly."""

    def __init__(self, core: Core, openai: OpenAIRelay, *, key_store: KeyStore | None = None) -> None:
        self._core = core
        self._openai = openai
        self._key_store = key_store  # the database keys (gateway.tenancy), when the app has them
        self._keys_for_users: frozenset[str] | None = None

    @property
    def settings(self) -> Settings:
        """The gateway's settings (read them; features keep their own in their settings class)."""
        return self._core.settings

    @property
    def default_model(self) -> str:
        """The engine-side model name the gateway sends for its aliases."""
        return self._core.engine_state.default_model

    @property
    def engine_ready(self) -> bool:
        """Whether the engine serves a model, as the gateway last saw it (polled every ``ENGINE_POLL_INTERVAL``)."""
        return self._core.engine_state.ready

    async def key_acts_for_users(self, key_id: str) -> bool:
        """Whether ``key_id`` names a key the gateway accepts now that may act for end users: a
        configured app or admin key (with no keys configured, the keyless local caller), or a
        database key of role app or admin that is neither revoked nor expired.

        A feature asks before it honours what such a key issued (the marketplace's end-user
        tokens), so removing or revoking the key revokes them too. A database key is read from
        the key store each time (one indexed read; a configured key costs a set look-up); a store
        that cannot answer within ``LOOKUP_TIMEOUT_SECONDS`` (the key resolver's bound for a key
        not cached) is a 503, never a guess.
        """
        return await self._issuer(key_id) is not None

    async def end_user(self, key_id: str, *, subject: str, token_id: str | None = None) -> Principal | None:
        """The principal of an end-user token that key ``key_id`` issued for end user ``subject``.

        Role ``user``, and the issuing key's team, limits, models, band and weight: its requests
        count against that key's limits, and its ``end_user`` limits apply to ``subject``
        (docs/keys.md). None when the key may no longer act for end users (as ``key_acts_for_users``:
        its tokens went with it); a 503 when the key store cannot say.
        """
        issuer = await self._issuer(key_id)
        if issuer is None:
            return None
        return dataclasses.replace(issuer, role="user", subject=subject, token_id=token_id)

    async def _issuer(self, key_id: str) -> Principal | None:
        """The principal of ``key_id`` if it is a key that may act for end users now, else None."""
        if self._keys_for_users is None:
            self._keys_for_users = _keys_acting_for_users(self._core.settings)
        if key_id in self._keys_for_users:
            return Principal(key_id=key_id, role="app")  # a configured key: no team, no limits
        if self._key_store is None or not KEY_ID.match(key_id):
            return None
        try:
            async with asyncio.timeout(LOOKUP_TIMEOUT_SECONDS):
                key = await self._key_store.resolve_id(key_id)
        except (StoreUnavailable, TimeoutError):
            raise GatewayError(503, "the key store is unavailable: this key cannot be checked now, retry shortly",
                               code="key_store_unavailable", headers={"retry-after": "1"}) from None
        if key is None or not key.valid_at(dt.datetime.now(dt.UTC)):
            return None
        principal = principal_of(key)
        return principal if principal.acts_for_users else None

    async def post_json(self, path: str, payload: dict, *, request_id: str | None = None,
                        request: Request | None = None) -> dict:
        """POST ``payload`` to the engine's ``path``; its JSON answer, or an ``EngineError``.

        ``request``: the request this serves (its id goes to the engine, the wait is its engine
        time). A feature that passes only ``request_id`` gets the same for the request being
        served in this task, found by that id (``gateway.http.context.current_request``).
        """
        context = request_context(request.scope) if request is not None else current_request()
        if context is not None and request is None and context.request_id != request_id:
            context = None  # (a call for another request than the one being served)
        if context is not None:
            # Admitted and settled like every inference call: limits, the usage ledger (relay.metering).
            engines = MeteredEngines(self._core.engines, self._core.relay.meter, self._core.relay.flow)
            return await engines.post_json(path, payload, request=context)  # (and queued: flow control)
        return await self._core.engines.post_json(path, payload, request_id=request_id)

    @property
    def resumable_streams(self) -> bool:
        """Whether streams run as resumable sessions (``SESSION_STORE`` other than ``off``)."""
        return self._core.streams.resumable

    async def stream_chat_completion(self, request: Request, payload: dict, *, session_id: str | None = None,
                                     on_complete: CompletionHook | None = None,
                                     resume_from: str | None = None) -> Response:
        """Stream a chat completion of ``payload`` (an OpenAI request body) to ``request``'s client.

        ``session_id`` names the resumable session (only when ``resumable_streams``; it then
        survives its client leaving, docs/sessions.md); sessions belong to the calling key.
        ``on_complete`` runs once the generation ended, with its ``StreamResult`` (the text,
        finish reason, usage and how it ended), even when the client left first.
        ``resume_from``: a ``Last-Event-ID`` (``<session_id>:<index>``, or an index of
        ``session_id``): the session's events after it are replayed, then followed live; nothing
        goes to the engine and ``on_complete`` is not run again (404 for an unknown session or
        another key's, 410, 204 and 400 as on ``/v1/chat/completions``).
        """
        return await self._openai.stream_chat_completion(request.scope, payload, session_id=session_id,
                                                         on_complete=on_complete, resume_from=resume_from)


def last_event_id(request: Request) -> str | None:
    """The resume position ``request`` asks for (``Last-Event-ID``, else ``?last_event_id=``), as sent."""
    return resume_value(request.headers, request.query_params)


def resume_point(value: str, *, session_id: str | None = None) -> ResumePoint:
    """``value`` (a ``Last-Event-ID``) read as a session and an index (a 400 naming ``last_event_id``
    when malformed; ``session_id``: the session the request names elsewhere, which it must match)."""
    return parse_last_event_id(value, session_id=session_id)


def request_id(request: Request) -> str | None:
    """The gateway's id of the request being served (sent to the engine, logged, returned)."""
    context = request.scope.get(SCOPE_KEY)
    return context.request_id if context is not None else None


def _keys_acting_for_users(settings: Settings) -> frozenset[str]:
    """The key ids of the configured app and admin keys (the middleware's KeyRing, built the same way)."""
    if not settings.auth_enabled:
        return frozenset({LOCAL_PRINCIPAL.key_id})
    return KeyRing.from_settings(settings).acting_for_users_ids
