"""Feature hook for resumable sessions: the routes and the session manager's lifecycle."""

from __future__ import annotations

from fastapi import FastAPI

from gateway.config import Settings
from gateway.streams.manager import SessionManager
from gateway.streams.routes import router
from gateway.streams.store import make_store

__all__ = ["router", "start", "stop"]


async def start(app: FastAPI, settings: Settings) -> None:
    """Open the session store and start the manager on ``app.state.sessions`` (None when off)."""
    if settings.session_store == "off":
        app.state.sessions = None
        return
    manager = SessionManager(settings=settings, upstream=app.state.upstream, metrics=app.state.metrics,
                             engine=app.state.engine, store=make_store(settings))
    await manager.start()
    app.state.sessions = manager


async def stop(app: FastAPI) -> None:
    manager = getattr(app.state, "sessions", None)
    app.state.sessions = None
    if manager is not None:
        await manager.stop()
