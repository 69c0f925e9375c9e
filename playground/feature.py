"""Feature hook for the playground page: its router, its public paths, and whether it is served."""

from __future__ import annotations

import logging

from fastapi import FastAPI

from gateway.config import Settings
from playground.assets import load_assets
from playground.routes import BASE_PATH, PUBLIC_PATHS, router
from playground.settings import PlaygroundSettings

__all__ = ["PUBLIC_PATHS", "router", "start", "stop"]

log = logging.getLogger("playground")


async def start(app: FastAPI, settings: Settings) -> None:
    """Read ``PLAYGROUND``; when the page is served, keep its files on ``app.state.playground``."""
    if PlaygroundSettings().serves_page(host=settings.host):
        app.state.playground = load_assets()
        host = f"[{settings.host}]" if ":" in settings.host else settings.host  # an IPv6 literal
        log.info("playground page served", extra={"url": f"http://{host}:{settings.port}{BASE_PATH}/"})
    else:
        app.state.playground = None


async def stop(app: FastAPI) -> None:
    app.state.playground = None
