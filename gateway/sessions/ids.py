"""Session ids and resume positions (``Last-Event-ID: <session_id>:<index>``): the one home of their rules."""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

from gateway.failures import Invalid

LAST_EVENT_ID = "last_event_id"
SESSION_HEADER = b"x-session-id"  # every session response names its session
SESSION_ID_MAX = 128
SESSION_ID_PATTERN = r"^[A-Za-z0-9._-]{1,128}$"  # also what the marketplace's schemas declare
SESSION_ID_RULE = "may contain only letters, digits, '-', '_' and '.' (at most 128 characters)"
_VALID = re.compile(r"[A-Za-z0-9._-]{1,128}")
# ASCII digits only: str.isdigit() also says yes to '²' and '١', which int() refuses or reads.
_POSITION = re.compile(r"-?[0-9]{1,18}")


def new_session_id() -> str:
    """An unguessable session id (144 random bits), valid as a client-chosen one too."""
    return "s-" + secrets.token_urlsafe(18)


def is_valid_session_id(value: object) -> bool:
    """Session ids are opaque strings the client chose: bounded, printable ASCII, no ':'."""
    return isinstance(value, str) and _VALID.fullmatch(value) is not None


def validate_session_id(value: object, *, param: str = "session_id") -> str:
    """``value`` if it is a valid session id; ``Invalid`` naming ``param`` otherwise."""
    if not isinstance(value, str) or not value:
        raise Invalid(f"'{param}' must be a non-empty string", param=param)
    if not is_valid_session_id(value):
        raise Invalid(f"'{param}' {SESSION_ID_RULE}", param=param)
    return value


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
        raise _bad(f"the session id in Last-Event-ID {SESSION_ID_RULE}")
    if session_id is not None and named != session_id:
        raise _bad(f"Last-Event-ID names session {named!r} but the request is for session {session_id!r}")
    index = parse_position(index_text)
    if index is None:
        raise _bad(f"the index in Last-Event-ID must be an integer, got {index_text[:40]!r}")
    if index < -1:
        raise _bad("the index in Last-Event-ID must be -1 (from the start) or more")
    return ResumePoint(named, index)


def parse_position(text: str) -> int | None:
    """An event position as clients write it (``-1``, ``0``, ``17``: ASCII digits, at most 18), else None."""
    text = text.strip()
    return int(text) if _POSITION.fullmatch(text) is not None else None


def resume_value(headers, query_params) -> str | None:
    """The resume position a request asks for, as sent, if any.

    The ``Last-Event-ID`` header wins over ``?last_event_id=``: a browser's EventSource
    keeps its URL (and so the query) when it reconnects, and sends its newest position in
    the header.
    """
    value = headers.get("last-event-id") or query_params.get(LAST_EVENT_ID)
    if value is None or not value.strip():
        return None
    return value


def _bad(message: str) -> Invalid:
    return Invalid(message, param=LAST_EVENT_ID, code="invalid_last_event_id")
