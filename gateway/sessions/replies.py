"""What the session routes answer besides a stream: the errors, 204 and the cancel result."""

from __future__ import annotations

from starlette.responses import Response

from gateway.failures import Conflict, Gone, Invalid, NotFound, Unavailable
from gateway.sessions.ids import SESSION_HEADER


def check_position(start: int, count: int, *, ended: bool) -> None:
    """Invalid when the client claims to have events past the last one."""
    if start > count:
        state = "finished with" if ended else "has produced"
        raise Invalid(f"Last-Event-ID index {start - 1} is past the session's last event: it {state} "
                      f"{count} event(s) (indices 0..{count - 1})", param="last_event_id",
                      code="invalid_last_event_id")


def nothing_left(session_id: str) -> Response:
    """The client already has everything, [DONE] included; 204 also stops an EventSource reconnecting."""
    return Response(status_code=204, headers={SESSION_HEADER.decode(): session_id})


def evicted(start: int, first_kept: int | None) -> Gone:
    kept = f"; the oldest event kept is {first_kept}" if first_kept is not None else ""
    return Gone(f"event {start} of this session is no longer available{kept}", param="last_event_id",
                code="events_evicted")


def unknown(session_id: str) -> NotFound:
    return NotFound(f"no session {session_id!r}", param="session_id", code="session_not_found")


def busy(session_id: str) -> Conflict:
    return Conflict(f"session {session_id!r} is still generating: resume it with Last-Event-ID, or cancel it first",
                    param="session_id", code="session_busy")


def store_unavailable() -> Unavailable:
    return Unavailable("the session store is unavailable", code="session_store_unavailable", retry_after=2)


# How a generation ended, as clients see it. The store also tells apart an ending written by
# another replica for a producer that died ("producer_lost"); clients see that as "error".
PUBLIC_HOW = {"producer_lost": "error"}


def public_how(how: str | None) -> str | None:
    return PUBLIC_HOW.get(how, how) if how is not None else None


def cancel_result(session_id: str, how: str | None, *, cancelled: bool) -> dict:
    return {"session_id": session_id, "object": "session.cancel", "cancelled": cancelled,
            "status": public_how(how) or "live"}


def session_state(session_id: str, *, status: str, how: str | None, events: int) -> dict:
    return {"session_id": session_id, "object": "session", "status": status, "how": public_how(how), "events": events}
