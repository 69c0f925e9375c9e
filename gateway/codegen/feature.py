"""Feature hook for the Stack 2.9 code-generation API: its routes and per-app state."""

from __future__ import annotations

from fastapi import FastAPI

from gateway.codegen.routes import router
from gateway.codegen.service import CheckpointDtypes
from gateway.config import Settings

__all__ = ["router", "start", "stop"]


async def start(app: FastAPI, settings: Settings) -> None:
    app.state.checkpoint_dtypes = CheckpointDtypes()


async def stop(app: FastAPI) -> None:
    app.state.checkpoint_dtypes = None
