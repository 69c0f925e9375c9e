"""Thin routes: follow a session (EventSource-friendly GET), look at it, cancel it."""

from __future__ import annotations

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from gateway.auth import PrincipalDep
from gateway.errors import GatewayError
from gateway.streams.ids import ResumePoint, is_valid_session_id, resume_point_of
from gateway.streams.manager import SessionManager

router = APIRouter(tags=["sessions"])


def _manager(request: Request, session_id: str) -> SessionManager:
    manager = getattr(request.app.state, "sessions", None)
    if manager is None:
        raise GatewayError(404, f"no session {session_id!r}: resumable sessions are disabled on this gateway "
                                "(SESSION_STORE=off)", param="session_id", code="sessions_disabled")
    if not is_valid_session_id(session_id):
        raise GatewayError(400, "'session_id' may contain only letters, digits, '-', '_' and '.' "
                                "(at most 128 characters)", param="session_id")
    return manager


@router.get("/v1/sessions/{session_id}/events", summary="Replay and follow a session's events (SSE)")
async def session_events(session_id: str, request: Request, principal: PrincipalDep) -> Response:
    """Everything after ``Last-Event-ID`` (header, or ``?last_event_id=``; default: from the start), then live."""
    manager = _manager(request, session_id)
    point = resume_point_of(request.headers, request.query_params, session_id=session_id)
    return await manager.resume(owner=principal.key_id, point=point or ResumePoint(session_id, -1))


@router.get("/v1/sessions/{session_id}", summary="The state of a session's current generation")
async def session_state(session_id: str, request: Request, principal: PrincipalDep) -> Response:
    state = await _manager(request, session_id).describe(owner=principal.key_id, session_id=session_id)
    return Response(orjson.dumps(state), media_type="application/json")


@router.post("/v1/cancel/{session_id}", summary="Cancel a session's generation (vLLM aborts it)")
async def cancel_session(session_id: str, request: Request, principal: PrincipalDep) -> Response:
    result = await _manager(request, session_id).cancel(owner=principal.key_id, session_id=session_id)
    return Response(orjson.dumps(result), media_type="application/json")
