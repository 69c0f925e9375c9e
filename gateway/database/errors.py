"""Which database failures are the request's fault: a value the database cannot hold.

A statement can fail because the database is down (refused, reset, timed out: a 503, retry) or
because a value in it can never be stored or compared: PostgreSQL's SQLSTATE class 22 (data
exception: a string too long for its column, a number out of its type's range, an invalid
date), asyncpg's own ``DataError`` for a value it cannot encode (an integer beyond 64 bits, a
string with a lone surrogate), and SQLite's driver's ``OverflowError`` (an integer beyond 64
bits) and ``UnicodeEncodeError`` (a lone surrogate), which it raises unwrapped. Retrying those
never helps, so the stores answer them as the client's mistake (a 400), not as an outage.
The routes check what they can first, naming the field; this is the backstop for what they
missed, and the one home of the distinction for every store of these tables.
"""

from __future__ import annotations

from sqlalchemy.exc import DataError, DBAPIError

DATA_EXCEPTION_CLASS = "22"  # SQLSTATE class 22: data exception
UNWRAPPED = (OverflowError, UnicodeEncodeError)  # what sqlite3 raises for a value it cannot bind
MAX_REASON = 200


def refused_value(exc: BaseException) -> str | None:
    """What to tell the client when the statement ``exc`` failed on a value the database cannot take (the
    message of the stores' 400s, with the driver's reason), or None if it failed otherwise."""
    if isinstance(exc, UNWRAPPED):
        return _told(exc)
    if isinstance(exc, DBAPIError):
        driver = exc.orig
        if isinstance(exc, DataError) or _sqlstate(driver).startswith(DATA_EXCEPTION_CLASS):
            return _told(driver if driver is not None else exc)
        return None
    if _sqlstate(exc).startswith(DATA_EXCEPTION_CLASS):  # a driver's error, unwrapped
        return _told(exc)
    return None


def _told(exc: BaseException) -> str:
    return f"a value in the request cannot be stored: {_reason(exc)}"


def _sqlstate(exc: BaseException | None) -> str:
    state = getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None)
    return state if isinstance(state, str) else ""


def _reason(exc: BaseException) -> str:
    """The innermost cause's words (asyncpg wraps the Python error that refused the value; SQLAlchemy's
    adapter wraps asyncpg's), never the statement."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return reason[:MAX_REASON]
