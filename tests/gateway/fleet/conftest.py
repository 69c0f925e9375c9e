"""Fleet tests on fake engines: the gateway in front of several, in process or under real uvicorn."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx

from gateway.app import create_app
from gateway.config import Settings


@contextlib.asynccontextmanager
async def serving(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """The app with its lifespan running, behind an in-process httpx client (``client.app``)."""
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost", timeout=30) as client:
            client.app = app  # type: ignore[attr-defined]
            yield client
