"""Feature hook for the Stack 2.9 code-generation API (filled in by the code API work)."""

from __future__ import annotations

from fastapi import APIRouter, FastAPI

from gateway.config import Settings

router = APIRouter(tags=["code generation"])


async def start(app: FastAPI, settings: Settings) -> None:
    return None


async def stop(app: FastAPI) -> None:
    return None
