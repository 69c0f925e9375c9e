"""How a stream ends, for every stream of every protocol: the one home of the ending rules and their words.

A stream ends in one of four ways, and the client always learns which, in its protocol's own
event shapes (the dialect writes them; this module decides):

- **completed**: the engine's terminal event went by (``[DONE]``, ``message_stop``,
  ``response.completed`` or ``response.incomplete``); nothing is added;
- **stopped by the gateway** for a reason (:data:`STOP_REASONS`): a cancel, a client that
  left, a named session left alone too long: the dialect's *cancelled* ending, carrying the
  reason; the gateway shutting down, or another replica taking the generation over: the
  dialect's *error* ending, with its code;
- **failed**: the engine died, stalled, refused a continuation, or stopped without its
  terminal event, and no other engine could go on: the dialect's error ending
  (``stream_interrupted``) with the failure's message; or it streamed output the protocol
  cannot deliver (``InvalidOutput``, raised by the dialect's tracker): the error ending with
  that failure's own code (``invalid_tool_call``).

The ``how`` each ending is counted as (``gateway_streams_ended_total``, a session's state)
is decided here too.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.failures import InvalidOutput, LimitReached, UpstreamFailed
from gateway.relay.dialect import StreamDialect

# Why the gateway stopped a stream, as its cancelled ending says (``cancel_reason``).
CANCEL_REQUEST = "cancel_request"              # POST /v1/cancel/{session_id} (or a protocol's own cancel)
CLIENT_DISCONNECTED = "client_disconnected"    # its last client left, and nobody named it
DISCONNECT_TIMEOUT = "disconnect_timeout"      # a named session was left alone too long
SHUTDOWN = "shutdown"                          # the gateway is stopping
FENCED = "fenced"                              # the store says another replica owns it now

# How each stop is counted (StreamResult.how).
STOP_HOW = {
    CANCEL_REQUEST: "cancelled",
    CLIENT_DISCONNECTED: "client_disconnect",
    DISCONNECT_TIMEOUT: "client_disconnect",
    SHUTDOWN: "error",
    FENCED: "error",
}
STOP_REASONS = frozenset(STOP_HOW)

# The words of every ending the gateway writes, once each.
ENDED_EARLY = "the inference engine ended the stream early"
SHUTDOWN_MESSAGE = "the gateway shut down during the generation"
FENCED_MESSAGE = "another gateway replica ended or replaced this generation"
GATEWAY_FAILED = "the gateway failed while relaying the stream"
INTERRUPTED = "the generation was interrupted"
NO_ENGINE_CONTINUES = "no other engine could continue the stream"
NOR_FROM_WHAT_WAS_SENT = "nor could it go on from what was already sent"


def interrupted(message: str) -> UpstreamFailed:
    """The failure that ends a stream in error after it started (``stream_interrupted``)."""
    return UpstreamFailed(message, code="stream_interrupted")


def not_continued(cause: str, why: str, *, diverged: bool) -> UpstreamFailed:
    """The failure of a stream no engine could continue (``why``), after ``cause`` broke it."""
    if diverged:
        return interrupted(f"{cause}; {NOR_FROM_WHAT_WAS_SENT} ({why})")
    return interrupted(f"{cause}; {NO_ENGINE_CONTINUES} ({why})")


@dataclass(slots=True)
class Ending:
    how: str                  # completed | cancelled | client_disconnect | error
    events: list[bytes]       # what the gateway adds after the engine's events (none when completed)
    error: str | None = None  # the message of an error ending


def ending_of(dialect: StreamDialect, *, completed: bool, stop_reason: str | None, failure: Exception | None,
              first_event: bytes | None, run_id: str, model: object, choices: int,
              usage: dict | None = None) -> Ending:
    """The ending of a stream: ``completed`` (its terminal event went by), else why it stopped or failed.

    ``first_event``: the stream's first event as the engine wrote it (an ending shaped like the
    stream's own copies its ids from it); ``run_id``: the gateway's id of the run (the request's
    id, or the session's when the ending is written elsewhere), for endings with no first event;
    ``usage``: what the stream used so far, as counted (a cancelled ending may report it).
    """
    if completed:
        return Ending("completed", [])
    if stop_reason == SHUTDOWN:
        return Ending("error", dialect.error_events(SHUTDOWN_MESSAGE, "gateway_shutdown"), SHUTDOWN_MESSAGE)
    if stop_reason == FENCED:
        return Ending("error", dialect.error_events(FENCED_MESSAGE, "producer_lost"), FENCED_MESSAGE)
    if stop_reason is not None:
        events = dialect.cancelled_events(first_event=first_event, reason=stop_reason, run_id=run_id, model=model,
                                          choices=choices, usage=usage)
        return Ending(STOP_HOW[stop_reason], events)
    message = str(getattr(failure, "message", None) or ENDED_EARLY) if failure is not None else ENDED_EARLY
    code = failure.code if isinstance(failure, (LimitReached, InvalidOutput)) and failure.code \
        else "stream_interrupted"
    return Ending("error", dialect.error_events(message, code), message)
