"""The gateway under test: served in process or on a real port, and the API keys tests give it.

``serving(settings)`` runs the app's lifespan behind an in-process httpx client (fast, but
httpx's ASGITransport buffers whole responses); ``running_gateway(settings)`` serves it
under real uvicorn on a free port, for SSE timing, keep-alives and disconnects.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx

from gateway.app import create_app
from gateway.config import Settings
from tests.support.servers import serve_uvicorn

READ_KEY = "sk-test-read-0123456789"      # an API_KEYS key
WRITE_KEY = "sk-test-write-9876543210"    # an ADMIN_API_KEYS key
OTHER_KEY = "sk-test-other-5647382910"    # a second read key: another owner of sessions


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


@contextlib.asynccontextmanager
async def serving(settings: Settings, *, features: dict | None = None) -> AsyncIterator[httpx.AsyncClient]:
    """The app with its lifespan running, behind an in-process httpx client (``client.app`` is the app).

    ``features``: feature factories by name, as ``create_app`` takes them (default: the installed ones).
    """
    app = create_app(settings, features=features)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        # (localhost: a gateway without keys answers only requests addressed to this machine)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            client.app = app  # type: ignore[attr-defined]
            yield client


@contextlib.asynccontextmanager
async def running_gateway(settings: Settings) -> AsyncIterator[tuple[str, object]]:
    """(base URL, app) of the gateway served by uvicorn on a free port."""
    app = create_app(settings)
    async with serve_uvicorn(app) as base_url:
        yield base_url, app


def in_memory(app) -> int:
    """Generations the app keeps in memory, as its /metrics reports them."""
    return int(app.state.gateway.metrics.registry.get_sample_value("gateway_sessions_in_memory"))
