"""Session ids and resume positions (``Last-Event-ID: <session_id>:<index>``)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from gateway.errors import GatewayError
from gateway.openai.prepare import SESSION_ID_MAX

LAST_EVENT_ID = "last_event_id"


def new_session_id() -> str:
    """An unguessable session id (144 random bits), valid as a client-chosen one too."""
    return "s-" + secrets.token_urlsafe(18)


def is_valid_session_id(value: str) -> bool:
    """The same rule ``prepare.validate_session_id`` applies to ids in request bodies."""
    return 0 < len(value) <= SESSION_ID_MAX and all(c.isalnum() or c in "-_." for c in value)


@dataclass(frozen=True, slots=True)
class ResumePoint:
    session_id: str
    last_index: int  # the last event the client has; -1: it has nothing yet

    @property
    def next_index(self) -> int:
        return self.last_index + 1


def parse_last_event_id(value: str, *, session_id: str | None = None) -> ResumePoint:
    """Read ``<session_id>:<index>`` (or a bare ``<index>`` when ``session_id`` is known).

    ``session_id`` is the session the request names elsewhere (path or body);
    a Last-Event-ID naming another session is refused rather than guessed at.
    """
    named, sep, index_text = value.strip().rpartition(":")
    if not sep:
        named, index_text = "", value.strip()
    if not named:
        if session_id is None:
            raise _bad(f"Last-Event-ID must be '<session_id>:<index>', got {value[:80]!r}")
        named = session_id
    if not is_valid_session_id(named):
        raise _bad("the session id in Last-Event-ID may contain only letters, digits, '-', '_' and '.'")
    if session_id is not None and named != session_id:
        raise _bad(f"Last-Event-ID names session {named!r} but the request is for session {session_id!r}")
    try:
        index = int(index_text)
    except ValueError:
        raise _bad(f"the index in Last-Event-ID must be an integer, got {index_text[:40]!r}") from None
    if index < -1:
        raise _bad("the index in Last-Event-ID must be -1 (from the start) or more")
    return ResumePoint(named, index)


def resume_point_of(headers, query_params, *, session_id: str | None = None) -> ResumePoint | None:
    """The resume position a request asks for, if any.

    The ``Last-Event-ID`` header wins over ``?last_event_id=``: a browser's
    EventSource keeps its URL (and so the query) when it reconnects, and sends
    its newest position in the header.
    """
    value = headers.get("last-event-id") or query_params.get(LAST_EVENT_ID)
    if value is None or not value.strip():
        return None
    return parse_last_event_id(value, session_id=session_id)


def _bad(message: str) -> GatewayError:
    return GatewayError(400, message, param=LAST_EVENT_ID, code="invalid_last_event_id")
