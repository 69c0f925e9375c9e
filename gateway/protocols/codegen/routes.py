"""Thin routes of the Stack 2.9 code API: parse, call one service function, answer.

Errors leave as ``{"detail": ...}`` (the app's handlers), the shape Stack 2.9 clients parse.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from gateway.core import Core
from gateway.http.auth import PrincipalDep
from gateway.http.context import request_context
from gateway.http.disconnect import unless_client_leaves
from gateway.protocols.codegen import service
from gateway.protocols.codegen.protocol import (
    ChatRequest,
    ChatResponse,
    ExtractCodeRequest,
    ExtractCodeResponse,
    GenerateRequest,
    GenerateResponse,
    ModelInfoResponse,
    extract_code_response,
)
from gateway.relay.metering import metered


def codegen_router(core: Core) -> APIRouter:
    router = APIRouter(tags=["code generation"])
    dtypes = service.CheckpointDtypes()

    @router.get("/model-info", response_model=ModelInfoResponse, summary="The served model, its device and dtype")
    async def model_info(_: PrincipalDep) -> Any:
        return await service.model_info(engine=core.engine_state, settings=core.settings, dtypes=dtypes)

    async def _generate(body: GenerateRequest, request: Request, *, extract: bool) -> Any:
        work = service.generate(request=body, extract=extract, upstream=metered(core), engine=core.engine_state,
                                settings=core.settings, context=request_context(request.scope))
        return await unless_client_leaves(request, work)

    @router.post("/generate", response_model=GenerateResponse, summary="Complete a prompt; return the code")
    async def generate(body: GenerateRequest, request: Request, _: PrincipalDep) -> Any:
        return await _generate(body, request, extract=True)

    @router.post("/generate/raw", response_model=GenerateResponse,
                 summary="Complete a prompt; return the text as generated")
    async def generate_raw(body: GenerateRequest, request: Request, _: PrincipalDep) -> Any:
        return await _generate(body, request, extract=False)

    @router.post("/chat", response_model=ChatResponse, summary="Answer a conversation with the model's chat template")
    async def chat(body: ChatRequest, request: Request, _: PrincipalDep) -> Any:
        work = service.chat(request=body, upstream=metered(core), engine=core.engine_state, settings=core.settings,
                            context=request_context(request.scope))
        return await unless_client_leaves(request, work)

    @router.post("/extract-code", response_model=ExtractCodeResponse, summary="Extract code from a markdown answer")
    async def extract_code(body: ExtractCodeRequest, _: PrincipalDep) -> Any:
        return extract_code_response(body)

    return router
