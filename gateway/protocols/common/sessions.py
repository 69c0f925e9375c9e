"""What every streamed protocol reads alike about sessions: the ``session_id`` it may be named by, and a resume.

A streamed chat completion or Messages request may name its session with the gateway's own
body field ``session_id`` (taken out before the body reaches the engine); a named session
survives its client leaving for ``CANCEL_AFTER_DISCONNECT_SECONDS``. A request resumes a
session with ``Last-Event-ID`` (or ``?last_event_id=``): it is then answered from the
session's log, not sent to the engine.
"""

from __future__ import annotations

from starlette.datastructures import Headers, QueryParams

from gateway.http.context import RequestContext
from gateway.http.errors import GatewayError
from gateway.sessions.ids import resume_value, validate_session_id


def take_session_id(payload: dict, *, stream: bool, resumable: bool) -> str | None:
    """The gateway's ``session_id`` field, taken out of ``payload`` (None when absent); a 400 naming it."""
    if "session_id" not in payload:
        return None
    session_id = payload.pop("session_id")
    if session_id is None:
        return None
    if not stream:
        raise GatewayError(400, "'session_id' is only valid with \"stream\": true", param="session_id")
    if not resumable:
        raise GatewayError(400, "resumable sessions are disabled on this gateway (SESSION_STORE=off)",
                           param="session_id")
    return validate_session_id(session_id)


def asked_resume(request: RequestContext) -> str | None:
    """The ``Last-Event-ID`` the request resumes from (header, or ``?last_event_id=``), as sent.

    Headers and query parameters are built only when the request may carry one (their
    objects were a measurable part of a non-streamed request)."""
    scope = request.scope
    if not scope["query_string"] and not _has_header(scope["headers"], b"last-event-id"):
        return None
    return resume_value(Headers(scope=scope), QueryParams(scope["query_string"]))


def _has_header(headers: list[tuple[bytes, bytes]], wanted: bytes) -> bool:
    for name, _ in headers:  # a plain loop: a generator here cost one call per header per request
        if name == wanted:
            return True
    return False
