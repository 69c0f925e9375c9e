"""Feature hook for the marketplace: its router and database lifecycle."""

from __future__ import annotations

from fastapi import APIRouter, FastAPI

from gateway.config import Settings

router = APIRouter(tags=["marketplace"])


async def start(app: FastAPI, settings: Settings) -> None:
    return None


async def stop(app: FastAPI) -> None:
    return None
