"""The application factory: one place where the gateway is assembled.

``create_app(settings)`` builds everything from the settings it is given (tests
pass their own); nothing lives in module globals. The lifespan opens the one
upstream client, starts the engine poller, the session manager and the
marketplace database, and closes them in reverse order.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from fastapi import FastAPI

from gateway.admission import Admission
from gateway.auth import KeyRing
from gateway.config import Settings
from gateway.engine import EngineState
from gateway.errors import install_error_handlers
from gateway.metrics import Metrics
from gateway.middleware import GatewayMiddleware
from gateway.openai.fastpath import FAST_PATHS, serve_fast
from gateway.openai.routes import router as openai_router
from gateway.routes.health import router as health_router
from gateway.upstream import UpstreamClient

log = logging.getLogger("gateway.app")


class GatewayApp(FastAPI):
    """FastAPI with the gateway's middleware outside FastAPI's own stack.

    FastAPI wraps user middleware in three layers of its own (server errors,
    exception telemetry, body limit). The gateway's middleware does auth,
    limits and errors itself, so it goes outermost: the hot OpenAI routes it
    serves directly (see gateway/openai/fastpath.py) skip those layers, and
    everything else still passes through them.
    """

    gateway_middleware: dict | None = None

    def build_middleware_stack(self):
        stack = super().build_middleware_stack()
        if self.gateway_middleware is None:
            return stack
        return GatewayMiddleware(stack, **self.gateway_middleware)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    metrics = Metrics()
    upstream = UpstreamClient(settings)
    engine = EngineState(settings, upstream, metrics=metrics)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await upstream.start()
        async with contextlib.AsyncExitStack() as stack:
            stack.push_async_callback(upstream.close)
            await engine.refresh()
            engine.start_polling()
            stack.push_async_callback(engine.stop_polling)
            for feature in _features():
                await feature.start(app, settings)
                stack.push_async_callback(feature.stop, app)
            yield

    app = GatewayApp(
        title="stack-gateway",
        version="0.1.0",
        summary="OpenAI-compatible gateway to vLLM, with a code-generation API, resumable streams and a marketplace",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.upstream = upstream
    app.state.engine = engine
    app.state.sessions = None  # set by the sessions feature when SESSION_STORE != off
    install_error_handlers(app)
    app.include_router(health_router)
    app.include_router(openai_router)
    features = _features()
    for feature in features:
        app.include_router(feature.router)
    admission = Admission(max_inflight=settings.max_inflight, max_inflight_per_key=settings.max_inflight_per_key)
    metrics.inflight.set_function(lambda: admission.inflight)
    app.state.admission = admission
    app.gateway_middleware = dict(
        keyring=KeyRing.from_settings(settings),
        admission=admission,
        metrics=metrics,
        max_body_bytes=settings.max_body_bytes,
        metrics_require_auth=settings.metrics_require_auth and settings.auth_enabled,
        access_log=settings.access_log,
        fast_paths=frozenset(FAST_PATHS),
        serve_fast=serve_fast,
        public_paths=frozenset().union(*(getattr(f, "PUBLIC_PATHS", ()) for f in features)),
    )
    return app


def _features() -> list:
    """Feature packages, each exposing ``router``, ``start(app, settings)`` and ``stop(app)``.

    A feature may also expose ``PUBLIC_PATHS``: exact paths it serves without an API key.
    """
    from gateway.codegen import feature as codegen
    from gateway.streams import feature as streams
    from marketplace import feature as marketplace
    from playground import feature as playground

    return [streams, codegen, marketplace, playground]
