"""Liveness, readiness and metrics.

``/health`` keeps the Stack 2.9 shape (``status``, ``model_loaded``, ...) and adds
readiness details; it always answers 200 while the gateway lives. ``/readyz`` answers
503 until an engine is ready, for load balancers. ``features`` gives each feature's own
``status()`` (``ready`` and what it says of itself); a feature that is not ready (the
marketplace while its database is down) leaves ``/readyz`` at 200, since the core serves
``/v1`` and the feature answers its own routes with 503s meanwhile. None of them ever waits on a
generation: they read the engine state, which is refreshed with a short timeout when
older than a second.

``engines`` lists every engine of the fleet: its address (credentials stripped), whether it
is ready and whether it is ejected after a failure, its models, its load (from its
``/metrics`` and this gateway's own open requests) and its last error as a short kind
(``refused``, ``stalled``, ``http_503``, ...), never the error's text: ``/health`` is public.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from fastapi import APIRouter
from starlette.responses import JSONResponse, Response

from gateway.core import Core
from gateway.engines.device import reported_device
from gateway.engines.engine import Engine


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

    @router.get("/health", summary="Gateway liveness and engine readiness (Stack 2.9 shape)")
    async def health() -> dict:
        return await engine_status()

    @router.get("/livez", summary="Liveness: the gateway process answers")
    async def livez() -> dict:
        return {"status": "alive"}

    @router.get("/readyz", summary="Readiness: 200 only when the engine is ready")
    async def readyz() -> Response:
        status = await engine_status()
        return JSONResponse(status, status_code=200 if status["ready"] else 503)

    @router.get("/metrics", summary="Prometheus metrics")
    async def metrics() -> Response:
        return Response(core.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    return router


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
