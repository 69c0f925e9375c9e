"""Thin routes: follow a session (EventSource-friendly GET), look at it, cancel it.

Looking and cancelling are control requests (``CONTROL_EXTRA``): admitted even when the key is
at its in-flight cap, since stopping a generation is how a client frees its capacity.
"""

from __future__ import annotations

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from gateway.failures import NotFound
from gateway.http.admission import CONTROL_EXTRA
from gateway.http.auth import PrincipalDep
from gateway.sessions.ids import ResumePoint, parse_last_event_id, resume_value, validate_session_id
from gateway.sessions.manager import SessionManager


def sessions_router(manager: SessionManager | None) -> APIRouter:
    """The session routes; with sessions off (``manager`` None) they answer 404 sessions_disabled."""
    router = APIRouter(tags=["sessions"])

    def checked(session_id: str) -> SessionManager:
        if manager is None:
            raise NotFound(f"no session {session_id!r}: resumable sessions are disabled on this gateway "
                           "(SESSION_STORE=off)", param="session_id", code="sessions_disabled")
        validate_session_id(session_id)
        return manager

    @router.get("/v1/sessions/{session_id}/events", summary="Replay and follow a session's events (SSE)")
    async def session_events(session_id: str, request: Request, principal: PrincipalDep) -> Response:
        """Everything after ``Last-Event-ID`` (header, or ``?last_event_id=``; default: from the start), then live."""
        sessions = checked(session_id)
        value = resume_value(request.headers, request.query_params)
        point = parse_last_event_id(value, session_id=session_id) if value else ResumePoint(session_id, -1)
        return await sessions.resume(owner=principal.key_id, point=point)

    @router.get("/v1/sessions/{session_id}", summary="The state of a session's current generation",
                openapi_extra=CONTROL_EXTRA)
    async def session_state(session_id: str, principal: PrincipalDep) -> Response:
        state = await checked(session_id).describe(owner=principal.key_id, session_id=session_id)
        return Response(orjson.dumps(state), media_type="application/json")

    @router.post("/v1/cancel/{session_id}", summary="Cancel a session's generation (vLLM aborts it)",
                 openapi_extra=CONTROL_EXTRA)
    async def cancel_session(session_id: str, principal: PrincipalDep) -> Response:
        result = await checked(session_id).cancel(owner=principal.key_id, session_id=session_id)
        return Response(orjson.dumps(result), media_type="application/json")

    return router
