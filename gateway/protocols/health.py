"""Liveness, readiness and metrics, and what the gateway is (``/``).

``GET /`` and ``HEAD /`` answer 200 with a small description (what the gateway serves and
where its docs are; no model, no address): clients probe the base URL before they start
(Claude Code sends ``HEAD /``), and a person opening the URL learns where to go.

``/health`` keeps the Stack 2.9 shape (``status``, ``model_loaded``, ...) and adds
readiness details; it always answers 200 while the gateway lives. ``/readyz`` answers
503 until an engine is ready, for load balancers. ``features`` gives each feature's own
``status()`` (``ready`` and what it says of itself); a feature that is not ready (the
marketplace while its database is down) leaves ``/readyz`` at 200, since the gateway serves
``/v1`` and the feature answers its own routes with 503s meanwhile. None of them ever waits on a
generation: they read the engine state, which is refreshed with a short timeout when
older than a second.

Both are public (probes send no key), so what they show depends on who asks. A caller the
gateway knows (any valid key, or anyone when no key is configured and the gateway serves
loopback only) gets the details: the model, the device, ``engines`` (every engine of the
fleet: its address with credentials stripped, readiness, ejection, models, load from its
``/metrics`` and this gateway's open requests, its last error as a short kind such as
``refused``, ``stalled``, ``http_503``) and the engine's last error. Anyone else gets the
status alone (``public_health``/``public_readiness``): no model names, no addresses, no
error text, nothing that maps the deployment for a stranger. The same rule as
``/metrics``, which also names engines and needs a key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from gateway.core import Core
from gateway.engines.device import reported_device
from gateway.engines.engine import Engine
from gateway.http.context import SCOPE_KEY


class ReportsStatus(Protocol):
    """What readiness reads of a feature (``gateway.api.Feature``, which this layer may not import)."""

    name: str

    def status(self) -> dict: ...


def health_router(core: Core, features: Sequence[ReportsStatus] = ()) -> APIRouter:
    router = APIRouter(tags=["health"])

    async def engine_status() -> dict:
        engine = core.engine_state
        await engine.refresh_if_stale()
        device = reported_device(core.settings)
        return {
            "status": "healthy",
            "model_loaded": engine.ready,
            "model_path": engine.reported_model,
            "device": device,
            "cuda_available": device == "cuda",
            "ready": engine.ready,
            "engine": {
                "reachable": engine.reachable,
                "models": engine.public_models if engine.served_models else [],
                "max_model_len": engine.max_model_len,
                "error": engine.last_error,
            },
            "engines": [describe(member) for member in engine.engines],
            "features": {feature.name: feature.status() for feature in features},
        }

    # HEAD answers as GET (Claude Code probes it); kept out of the schema, where FastAPI would
    # give both methods of one route the same operation id.
    @router.get("/", summary="What this gateway is and where its APIs are")
    @router.head("/", include_in_schema=False)
    async def root() -> dict:
        return DESCRIPTION

    @router.get("/health", summary="Gateway liveness and engine readiness (Stack 2.9 shape; details with a key)")
    async def health(request: Request) -> dict:
        status = await engine_status()
        return status if knows(request) else public_health(status["ready"])

    @router.get("/livez", summary="Liveness: the gateway process answers")
    async def livez() -> dict:
        return {"status": "alive"}

    @router.get("/readyz", summary="Readiness: 200 only when the engine is ready (details with a key)")
    async def readyz(request: Request) -> Response:
        status = await engine_status()
        readiness = public_readiness(status["ready"])
        # A caller with a key gets the details too, under readiness's own status: /health's "healthy"
        # (alive) would contradict a 503.
        body = {**status, **readiness} if knows(request) else readiness
        return JSONResponse(body, status_code=200 if status["ready"] else 503)

    @router.get("/metrics", summary="Prometheus metrics")
    async def metrics() -> Response:
        return Response(core.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    return router


DESCRIPTION = {
    "name": "stack-gateway",
    "description": "OpenAI- and Anthropic-compatible gateway in front of vLLM engines",
    "apis": {
        "openai": "/v1 (chat/completions, completions, responses, models, embeddings)",
        "anthropic": "/v1/messages (base URL without /v1)",
        "stack": "/generate, /chat, /model-info",
    },
    "docs": "/docs",
    "health": "/health",
}


def knows(request: Request) -> bool:
    """Whether the caller sent a valid key (the middleware recognises one even on a public path)."""
    context = request.scope.get(SCOPE_KEY)
    return context is not None and context.principal is not None


def public_health(ready: bool) -> dict:
    """/health for a caller without a key: alive, and whether a model is loaded (Stack 2.9 clients read that bit)."""
    return {"status": "healthy", "model_loaded": ready, "ready": ready}


def public_readiness(ready: bool) -> dict:
    """/readyz for a caller without a key: the status its HTTP status already says, nothing more."""
    return {"status": "ok" if ready else "unavailable"}


def describe(engine: Engine) -> dict:
    """One engine as /health shows it (nothing secret, no engine error text)."""
    load = engine.load
    return {
        "url": engine.id,
        "ready": engine.ready,
        "ejected": engine.ejected,
        "models": list(engine.models),
        "max_model_len": engine.max_model_len,
        "load": {
            "score": engine.score(),
            "in_flight": engine.inflight,
            "running": load.running if load is not None else None,
            "waiting": load.waiting if load is not None else None,
            "kv_cache_usage": load.kv_cache_usage if load is not None else None,
            "prefix_cache_hits": load.prefix_cache_hits if load is not None else None,
            "prefix_cache_queries": load.prefix_cache_queries if load is not None else None,
        },
        "last_error": engine.error_kind,
    }
