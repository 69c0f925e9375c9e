"""What can go wrong, said without HTTP: the failures every layer below the protocols raises.

An engine that cannot be reached, a session that does not exist, a store that is down: the
layer that finds out raises one of these, saying what happened (a message a client can act
on, the request field it is about, a stable code, when to retry), never which status code
answers it. Each protocol maps them to its own HTTP answers in one place (its error shape,
``gateway.http.errors``), the way httpx keeps transport errors apart from responses.
``GatewayError`` (``gateway.http.errors``) is the one failure that carries a status: what the
HTTP edge (the middleware, the protocols' own request checks) raises.
"""

from __future__ import annotations


class Failure(Exception):
    """Something a client should hear about."""

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param              # the request field it is about
        self.code = code                # a stable word clients may switch on
        self.retry_after = retry_after  # seconds after which trying again may succeed


class Invalid(Failure):
    """The request is wrong (a field, a position it names)."""


class NotFound(Failure):
    """What the request names does not exist, or not for this caller."""


class Conflict(Failure):
    """What the request names is busy in a way the request cannot proceed with."""


class Gone(Failure):
    """What the request names existed, and is no longer kept."""


class LimitReached(Failure):
    """The caller is at one of its limits; it may try again later."""


class Unavailable(Failure):
    """Something the request needs cannot serve it now (an engine, a store, a stopping gateway)."""


class TimedOut(Failure):
    """Something the request needs did not answer in time."""


class UpstreamFailed(Failure):
    """Something the request needed broke the exchange (an engine died, sent garbage, ended a stream early)."""


class InvalidOutput(UpstreamFailed):
    """The engine answered, with output the protocol cannot deliver (a tool call whose arguments are no
    object); its code says which, in a stream's error event too (``relay.ending``)."""
