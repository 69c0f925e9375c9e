"""The public gateway API for features: everything a feature package may use, and nothing else.

A feature (``marketplace``, ``playground``, ...) is built by its entry point's factory from a
:class:`Gateway` (see ``gateway.features``) and returns a :class:`Feature`. Through the
``Gateway`` it can call the engine, stream a chat completion to a client through the
gateway's one streaming path (resumable sessions when they are on), and read the
generation defaults; its routes use the auth dependencies below, raise ``GatewayError``
(rendered as ``{"detail": ...}`` outside the OpenAI paths) and may catch the engine errors.
Import-linter keeps features to this module.
"""

from __future__ import annotations

from typing import Protocol

from fastapi import APIRouter
from pydantic_settings import BaseSettings
from starlette.requests import Request
from starlette.responses import Response

from gateway.config import Settings, is_loopback, sqlite_database
from gateway.core import Core
from gateway.engines.errors import BadGateway, EngineError, EngineHTTPError, EngineTimeout, EngineUnavailable
from gateway.http.auth import AppDep, Principal, PrincipalDep, TokenAuthenticator, UserDataDep, WriterDep
from gateway.http.errors import GatewayError
from gateway.protocols.openai.routes import OpenAIRelay
from gateway.relay.dialect import StreamResult
from gateway.relay.pump import CompletionHook
from gateway.sessions.ids import SESSION_ID_MAX, SESSION_ID_PATTERN, SESSION_ID_RULE, is_valid_session_id

__all__ = [
    "AppDep", "BadGateway", "TokenAuthenticator", "UserDataDep",
    "CompletionHook", "EngineError", "EngineHTTPError", "EngineTimeout", "EngineUnavailable",
    "Feature", "Gateway", "GatewayError", "Principal", "PrincipalDep", "SESSION_ID_MAX", "SESSION_ID_PATTERN",
    "SESSION_ID_RULE", "Settings", "StreamResult", "WriterDep", "is_loopback", "is_valid_session_id", "request_id",
    "sqlite_database",
]


class Feature(Protocol):
    """What a feature's entry point builds. The entry point names a factory called with the
    :class:`Gateway` (usually the feature's class); its ``settings_class`` attribute is the
    pydantic-settings class of the environment variables the feature reads. A feature may
    also have ``public_paths`` (a frozenset of exact paths it serves without an API key, such
    as the playground's files); every other path needs a key when the gateway has keys, or
    the feature's own end-user token: a feature with a ``token_authenticator``
    (``gateway.http.auth.TokenAuthenticator``) has its tokens accepted on the paths it names."""

    name: str
    settings: BaseSettings    # the feature's own settings (its environment variables)
    router: APIRouter | None  # its routes, included after the core's

    async def start(self) -> None: ...
    async def stop(self) -> None: ...

    def status(self) -> dict:
        """``{"ready": bool, ...}``: whether the feature can serve now (shown under ``features`` in
        ``/health`` and ``/readyz``; a feature that is not ready leaves ``/readyz`` at 200: the
        core still serves, and the feature answers its own routes meanwhile, with 503s)."""


class Gateway:
    """What a feature is given at assembly."""

    def __init__(self, core: Core, openai: OpenAIRelay) -> None:
        self._core = core
        self._openai = openai

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

    async def post_json(self, path: str, payload: dict, *, request_id: str | None = None) -> dict:
        """POST ``payload`` to the engine's ``path``; its JSON answer, or an ``EngineError``."""
        return await self._core.engines.post_json(path, payload, request_id=request_id)

    async def stream_chat_completion(self, request: Request, payload: dict, *, session_id: str | None = None,
                                     on_complete: CompletionHook | None = None) -> Response:
        """Stream a chat completion of ``payload`` (an OpenAI request body) to ``request``'s client.

        ``on_complete`` runs once the generation ended, with its ``StreamResult`` (the text,
        finish reason, usage and how it ended), even when the client left first.
        """
        return await self._openai.stream_chat_completion(request.scope, payload, session_id=session_id,
                                                         on_complete=on_complete)


def request_id(request: Request) -> str | None:
    """The gateway's id of the request being served (sent to the engine, logged, returned)."""
    return request.scope.get("state", {}).get("request_id")
