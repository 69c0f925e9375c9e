"""The application factory, the composition root: the one place where the gateway is assembled.

``create_app(settings)`` builds the core from the settings it is given (tests pass their
own), hands it to the protocols' route factories, and plugs in the features found through
entry points (``gateway.features``); nothing lives in module globals. The lifespan opens
the engine client, starts the engine poller, the session manager, the response store and the
features, and closes them in reverse order.

Layers, each importing only from those above it in this list (import-linter checks it):
``failures`` -> ``config`` -> ``http`` (plumbing, the request context) -> ``engines`` (the engine
client and its state) -> ``relay`` (the stream runner, relayed calls) -> ``core`` -> ``sessions``
-> ``protocols`` -> ``api`` (what features may use) -> ``features`` -> ``app``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from gateway.api import Feature, Gateway
from gateway.batches.service import OfflineJobs
from gateway.config import Settings
from gateway.core import Core
from gateway.database.service import GatewayDatabase
from gateway.engines.client import EngineClient
from gateway.engines.discovery import DnsDiscovery
from gateway.engines.fleet import Fleet
from gateway.engines.router import Router
from gateway.engines.state import EngineState
from gateway.features import FeatureFactory, installed_features, selected
from gateway.http import queueing
from gateway.http.admission import Admission
from gateway.http.api_docs import api_docs_router
from gateway.http.auth import DatabaseKeys, KeyRing
from gateway.http.browser_guards import HostCheck
from gateway.http.cors import CorsPolicy
from gateway.http.errors import OPENAI_SHAPE, ErrorShapes, install_error_handlers
from gateway.http.key_ids import secret_from_settings
from gateway.http.logs import configure_logging
from gateway.http.metrics import Metrics
from gateway.http.middleware import GatewayMiddleware
from gateway.http.raw_routes import (
    RawRoute,
    RawRouter,
    control_requests,
    document_raw_routes,
    multipart_paths,
    register_shapes,
)
from gateway.http.request_head import BoundedHttpToolsProtocol
from gateway.protocols.admin.routes import ADMIN_PREFIX, admin_router
from gateway.protocols.anthropic.dialect import ANTHROPIC
from gateway.protocols.anthropic.paths import anthropic_paths
from gateway.protocols.anthropic.routes import AnthropicMessages
from gateway.protocols.codegen.routes import codegen_router
from gateway.protocols.engine_api.routes import EngineAPI
from gateway.protocols.health import health_router
from gateway.protocols.openai.dialect import OPENAI
from gateway.protocols.openai.routes import OpenAIRelay
from gateway.protocols.responses.dialect import ending_dialect
from gateway.protocols.responses.records import make_records
from gateway.protocols.responses.routes import ResponsesAPI
from gateway.relay.call import Relay, StreamBackend
from gateway.relay.end_users import EndUsers
from gateway.relay.live import LiveRuns
from gateway.relay.metering import Meter
from gateway.relay.plain import PlainRelay
from gateway.serving import drain_on_signals, freeze_startup_heap
from gateway.sessions.manager import SessionManager
from gateway.sessions.routes import sessions_router
from gateway.sessions.store import make_store
from gateway.tenancy.service import Tenancy
from gateway.tracing.provider import Tracing

log = logging.getLogger("gateway.app")


class GatewayApp(FastAPI):
    """FastAPI with the gateway's middleware and raw routes outside FastAPI's own stack.

    FastAPI wraps user middleware in layers of its own (server errors, exception
    telemetry, body limit). The gateway's middleware does auth, limits and errors itself,
    so it goes outermost, then the raw router serves the hot routes it declares (see
    ``gateway.http.raw_routes``); everything else passes through FastAPI as usual.
    """

    gateway_middleware: dict | None = None
    raw_routes: list[RawRoute] = []  # set by create_app

    _direct: bool | None = None  # whether HTTP requests go straight to the middleware stack

    async def __call__(self, scope, receive, send) -> None:
        # FastAPI asks OpenTelemetry on every request whether it should trace it (a handful
        # of calls through the global providers: 1-2% of a non-streamed request's
        # instructions). Decided once, at the first request: without a configured provider
        # (the gateway configures none) HTTP requests enter the middleware stack directly, as
        # Starlette's own __call__ would send them; with one, FastAPI's path is kept.
        if scope["type"] == "http":
            if self._direct is None:
                # (A FastAPI without this private member keeps its own path: nothing is assumed.)
                telemetry = getattr(self, "_native_telemetry", None)
                self._direct = not self.root_path and telemetry is not None and not telemetry.enabled()
            if self._direct:
                scope["app"] = self
                if self.middleware_stack is None:
                    self.middleware_stack = self.build_middleware_stack()
                await self.middleware_stack(scope, receive, send)
                return
        await super().__call__(scope, receive, send)

    def build_middleware_stack(self):
        stack = super().build_middleware_stack()
        if self.gateway_middleware is None:
            return stack
        return GatewayMiddleware(RawRouter(stack, self.raw_routes), **self.gateway_middleware)

    def begin_drain(self, grace_seconds: float | None = None) -> None:
        """The server is stopping: let the core end what it serves before connections are cut."""
        core = self.state.gateway
        core.begin_drain(core.settings.graceful_shutdown_seconds if grace_seconds is None else grace_seconds)

    def openapi(self) -> dict:
        if self.openapi_schema is None:
            schema = get_openapi(title=self.title, version=self.version, summary=self.summary, routes=self.routes)
            self.openapi_schema = document_raw_routes(schema, self.raw_routes)
        return self.openapi_schema


def create_served_app() -> FastAPI:
    """The app each worker of ``stack-gateway`` serves (``WORKERS`` > 1, ``RELOAD``): the environment's gateway.

    A worker is a process of its own (spawned), which reads the settings anew and must set up
    what is the process's, not the app's (:func:`configure_served_process`): without it its log
    lines were not JSON, and the access log and every other INFO line were lost (Python's
    last-resort handler prints warnings only).
    """
    settings = Settings()
    configure_served_process(settings)
    return create_app(settings, freeze_heap_when_started=True)


def configure_served_process(settings: Settings) -> None:
    """What a serving process sets up once from ``settings``, whichever way it serves (``gateway.cli``
    with one process, :func:`create_served_app` in each worker): its logging, and the request head's
    and body's bounds of its HTTP protocol (``gateway.http.request_head``)."""
    configure_logging(settings.log_level)
    BoundedHttpToolsProtocol.configure(max_head_bytes=settings.request_head_max_bytes,
                                       head_timeout=settings.request_head_timeout_seconds,
                                       body_timeout=settings.request_body_timeout_seconds,
                                       body_min_rate=settings.request_body_min_rate)


def create_app(settings: Settings | None = None, *, features: dict[str, FeatureFactory] | None = None,
               freeze_heap_when_started: bool = False) -> FastAPI:
    """The gateway for ``settings``; ``features``: factories to plug in (default: the installed ones).

    ``freeze_heap_when_started``: for the one app of a served process (``create_served_app``);
    tests that build many apps in one process leave it off, or each app would stay frozen.
    """
    settings = settings or Settings()
    metrics = Metrics()
    tracing = Tracing.from_settings(settings)  # None unless an OTLP endpoint is set (docs/tracing.md)
    fleet = Fleet.from_settings(settings, metrics=metrics)
    engines = EngineClient(settings, fleet, router=Router.from_settings(settings, fleet, metrics=metrics),
                           metrics=metrics)
    engine_state = EngineState(settings, engines, metrics=metrics, fleet=fleet,
                               discovery=DnsDiscovery.from_settings(settings))
    engines.when_none_ready = engine_state.look_again  # an engine may have come up since the last look
    admission = Admission(max_inflight=settings.max_inflight, max_inflight_per_key=settings.max_inflight_per_key)
    shapes = ErrorShapes()
    shapes.register_prefix("/v1/", OPENAI_SHAPE)
    shapes.register_prefix(ADMIN_PREFIX, OPENAI_SHAPE)
    database = GatewayDatabase(settings)  # the gateway's own tables: one engine, one migration history
    tenancy = Tenancy(settings, database)  # keys in the database, limits, the usage ledger (docs/keys.md)
    flow = queueing.flow_control(settings, engines, engine_state, metrics, admission)  # None: FLOW_CONTROL off
    # In flight: what admission counts, and the generating requests flow control let go (it counts those).
    caps = flow.scheduler.caps if flow is not None else None
    metrics.inflight.set_function(lambda: admission.inflight + (caps.held if caps is not None else 0))
    relay = Relay(engines=engines, metrics=metrics, keepalive_seconds=settings.sse_keepalive_seconds, live=LiveRuns(),
                  flow=flow, meter=Meter(tenancy.limiter, tenancy.ledger, resolve_model=engine_state.resolve_model,
                                         end_users=EndUsers(secret_from_settings(settings))))
    # A generating request's max_concurrency: without Redis the limiter counts per replica, as flow
    # control does, so the request waits in the queue instead of a 429. With Redis the count is
    # fleet-wide (docs/keys.md: exact across replicas), which only the limiter can hold: it
    # stays there, and a request beyond it is refused.
    if flow is not None and not settings.redis_url:
        relay.meter.queued_paths = queueing.QUEUED_PATHS
    sessions = _session_manager(settings, relay, engine_state, admission)
    metrics.session_store_backlog_limit.set(settings.session_max_unpersisted_bytes)
    if sessions is not None and sessions.persistence is not None:
        writer = sessions.persistence.writer
        metrics.session_store_backlog.set_function(lambda: writer.backlog_bytes)
    streams: StreamBackend = sessions if sessions is not None else PlainRelay(relay)
    core = Core(settings=settings, metrics=metrics, engines=engines, engine_state=engine_state,
                admission=admission, error_shapes=shapes, relay=relay, streams=streams)
    if sessions is not None:
        core.drain_hooks.append(sessions.begin_shutdown)
    if flow is not None:
        core.drain_hooks.append(lambda grace: flow.close())  # queued requests get their 503 at once
    openai = OpenAIRelay(core)
    engine_api = EngineAPI(core)
    responses = ResponsesAPI(core, records=make_records(settings), sessions=sessions)
    anthropic = AnthropicMessages(core)
    gateway = Gateway(core, openai, key_store=tenancy.store)
    # Files, batches and webhooks (docs/batches.md).
    jobs = OfflineJobs(core, database, key_store=tenancy.store) if settings.batches_enabled else None
    if jobs is not None:  # background Responses' ends become response.* webhook events
        responses.runs.on_ended = jobs.response_ended
    factories = selected(settings.features, installed_features() if features is None else features)
    plugged: list[Feature] = [factory(gateway) for factory in factories.values()]
    # Features' routes whose engine calls wait their turn in flow control, as the code API's do.
    admission.defer_also(frozenset().union(*(getattr(feature, "queued_paths", ()) for feature in plugged)))

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await engines.start()
        async with contextlib.AsyncExitStack() as stack:
            if tracing is not None:  # last out: the spans of the requests the drain ends are exported
                stack.push_async_callback(asyncio.to_thread, tracing.shutdown)
            stack.push_async_callback(engines.close)
            stack.enter_context(drain_on_signals(lambda: core.begin_drain(settings.graceful_shutdown_seconds)))
            await database.start()  # migrates; waits for the first attempt at most 30 s, then in the background
            stack.push_async_callback(database.stop)  # after everything that writes to it
            await tenancy.start()
            stack.push_async_callback(tenancy.stop)
            await engine_state.refresh()
            engine_state.start_polling()
            stack.push_async_callback(engine_state.stop_polling)
            if sessions is not None:
                await sessions.start()
                stack.push_async_callback(sessions.stop)
            await responses.start()
            stack.push_async_callback(responses.stop)
            for feature in plugged:
                await feature.start()
                stack.push_async_callback(feature.stop)
            if jobs is not None:
                await jobs.start()
                stack.push_async_callback(jobs.stop)
            if sessions is not None:  # first out: background runs use the drain's grace before anything closes
                stack.push_async_callback(sessions.finish_detached)
            if freeze_heap_when_started:
                freeze_startup_heap()
            yield

    app = GatewayApp(
        title="stack-gateway",
        version="0.1.0",
        summary="OpenAI-compatible gateway to vLLM, with a code-generation API, resumable streams and a marketplace",
        lifespan=lifespan,
        docs_url=None,  # served by http.api_docs, from the gateway's own files
        redoc_url=None,  # ReDoc loads from a CDN: not served
    )
    app.state.gateway = core  # for introspection and tests; the code below the app never reads app.state
    app.state.sessions = sessions
    app.state.tracing = tracing
    app.state.database = database
    app.state.tenancy = tenancy
    app.state.jobs = jobs
    for feature in plugged:  # each feature's own dependencies fetch it there (one tiny getter)
        setattr(app.state, feature.name, feature)
    install_error_handlers(app, shapes)
    # The engine API: one table (protocols.common.table), each protocol serving its rows.
    app.raw_routes = openai.routes() + responses.routes() + anthropic.routes() + engine_api.routes()
    register_shapes(shapes, app.raw_routes)
    routers = [engine_api.refusals(shapes), anthropic_paths(shapes),
               health_router(core, features=[*plugged, database, tenancy]),
               sessions_router(sessions), codegen_router(core), admin_router(tenancy, relay.meter.end_users)]
    routers += jobs.routers(shapes) if jobs is not None else []
    routers += [feature.router for feature in plugged if feature.router is not None]
    routers.append(api_docs_router(title=app.title))
    for router in routers:
        app.include_router(router)
    app.gateway_middleware = dict(
        keyring=KeyRing.from_settings(settings),
        admission=admission,
        metrics=metrics,
        error_shapes=shapes,
        max_body_bytes=settings.max_body_bytes,
        body_limits=jobs.body_limits() if jobs is not None else {},
        metrics_require_auth=settings.metrics_require_auth and settings.auth_enabled,
        access_log=settings.access_log,
        public_paths=frozenset().union(*(getattr(feature, "public_paths", ()) for feature in plugged)),
        control_requests=control_requests(app.raw_routes, [route for router in routers for route in router.routes]),
        cors=CorsPolicy.from_settings(settings),
        host_check=None if settings.auth_enabled else HostCheck(settings.allowed_hosts),
        multipart_paths=multipart_paths(app.raw_routes, routers),
        metrics_keys=KeyRing(read_keys=[key.get_secret_value() for key in settings.metrics_api_keys], write_keys=[],
                             secret=secret_from_settings(settings)),
        token_authenticators=(DatabaseKeys(tenancy.resolver),) + tuple(
            authenticator for feature in plugged
            if (authenticator := getattr(feature, "token_authenticator", None)) is not None),
        tracing=tracing,
        stopping=lambda: core.draining,
    )
    return app


def _session_manager(settings: Settings, relay: Relay, engine_state: EngineState,
                     admission: Admission) -> SessionManager | None:
    """Resumable sessions as ``SESSION_STORE`` asks (None when off: streams are relayed plainly)."""
    if settings.session_store == "off":
        return None
    return SessionManager(settings=settings, relay=relay, dialect=OPENAI, store=make_store(settings),
                          default_model=lambda: engine_state.default_model, admission=admission,
                          dialects={"responses": ending_dialect, "anthropic": lambda session_id, index: ANTHROPIC})
