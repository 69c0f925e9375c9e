"""Feature hook for resumable sessions (filled in by the sessions work)."""

from __future__ import annotations

from fastapi import APIRouter, FastAPI

from gateway.config import Settings

router = APIRouter(tags=["sessions"])


async def start(app: FastAPI, settings: Settings) -> None:
    app.state.sessions = None


async def stop(app: FastAPI) -> None:
    return None
