"""Tiny getters for what the app keeps on its state, as Annotated dependencies.

They are ``async def`` so FastAPI calls them inline instead of in its thread pool.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from gateway.config import Settings
from gateway.engine import EngineState
from gateway.metrics import Metrics
from gateway.upstream import UpstreamClient


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_upstream(request: Request) -> UpstreamClient:
    return request.app.state.upstream


async def get_engine(request: Request) -> EngineState:
    return request.app.state.engine


async def get_metrics(request: Request) -> Metrics:
    return request.app.state.metrics


SettingsDep = Annotated[Settings, Depends(get_settings)]
UpstreamDep = Annotated[UpstreamClient, Depends(get_upstream)]
EngineDep = Annotated[EngineState, Depends(get_engine)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
