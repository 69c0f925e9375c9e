"""Continuation: the runner moving a stream whose engine died or stalled to another engine.

When the engine fails a run that has a continuation (a reproducible request, supplied by its
protocol: ``relay.continuation``) and a sink that can say what it delivered (a session's log),
the same run goes on: a replay of the request on another engine (at most
``ENGINE_MAX_ATTEMPTS - 1`` switches, never on an engine that already failed it), through a
filter that drops what clients already have. When the replay produces other text than they
have, the run goes on from exactly what they have instead (the continuation's ``extend``),
and so after every later switch. Nothing of this costs anything per event until an engine
fails (what was delivered is read back from the sink then). When no engine can go on, the run
ends with its dialect's error ending. A stop (cancel, drain) works across a switch: the new
engine stream is the run's stream.

Each switch is counted in ``gateway_engine_continuations_total{engine, outcome}``.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Protocol

from gateway.engines.routing import NO_HINTS
from gateway.engines.stream import EngineStream
from gateway.failures import Failure
from gateway.http.context import RequestContext
from gateway.relay import ending as E
from gateway.relay.call import Relay, StreamCall
from gateway.relay.continuation import ContinuationDiverged, ReplayTracker
from gateway.relay.dialect import StreamTracker
from gateway.relay.pump import pump
from gateway.tracing.hooks import continuing

log = logging.getLogger("gateway.relay")

# Outcomes of a replay that produced other text than clients had (gateway_engine_continuations_total):
# the stream went on from exactly what clients had, or it could not and ended with the error event.
DIVERGED_CONTINUED = "diverged_continued"
DIVERGED = "diverged"


class Run(Protocol):
    """What of a run (``relay.run.Run``) its switches use."""

    call: StreamCall
    request: RequestContext
    relay: Relay
    sink: object  # a RunSink: ``write`` for the pump, ``delivered`` for what was sent
    stream: EngineStream
    tracker: StreamTracker
    stop_reason: str | None

    def _cut_short(self, failure: Failure | None) -> bool: ...


class Switches:
    """The switches of one run, from its first failure to its end."""

    __slots__ = ("run", "count", "failed", "extending")

    def __init__(self, run: Run) -> None:
        self.run = run
        self.count = 0
        self.failed: list[str] = []  # engines that broke this stream: not asked to continue it
        self.extending = False        # a replay diverged: from then on, go on from what was sent

    async def go_on(self, failure: Failure | None) -> Failure | None:
        """Continue on other engines while the stream is cut short; the failure to end with, if any."""
        run = self.run
        metrics = run.relay.metrics
        while True:
            if run.call.continuation is None:
                metrics.engine_continuations.labels("none", "not_continuable").inc()
                return failure
            diverged = isinstance(failure, ContinuationDiverged)
            if not diverged:  # the engine failed (a diverged replay's engine is healthy)
                if self.count >= run.relay.engines.max_attempts - 1:
                    return failure
                self.count += 1
                if run.stream.engine is not None:
                    self.failed.append(run.stream.engine.id)
            self.extending = self.extending or diverged
            tracker, failure = await self._switch(failure, diverged=diverged)
            if tracker is None:
                return failure
            failure = await pump(run.stream, tracker, run.sink, run.call.before_end)
            if not run._cut_short(failure):
                return failure

    async def _switch(self, failure: Failure | None, *, diverged: bool) -> tuple[ReplayTracker | None, Failure]:
        """The stream reopened elsewhere and its filtering tracker; or no tracker and the failure to end with."""
        run = self.run
        call, request, metrics = run.call, run.request, run.relay.metrics
        stream = run.stream
        cause = failure.message if failure is not None else E.ENDED_EARLY
        diverged_on = stream.engine.id if diverged and stream.engine is not None else "none"
        stream.close()
        continuing(request, stream.engine, cause)

        def given_up(outcome: str, why: str, engine: str = "none") -> tuple[None, Failure]:
            if diverged:  # the replay diverged and going on from what was sent failed too
                outcome, engine = DIVERGED, diverged_on
            metrics.engine_continuations.labels(engine, outcome).inc()
            log.warning("stream not continued", extra={"session_id": call.session_id, "reason": why,
                                                       "outcome": outcome})
            return None, E.not_continued(cause, why, diverged=diverged)

        try:
            delivered = await run.sink.delivered()
        except Exception as exc:  # the log's head is gone (evicted, no store), or unreadable
            return given_up("not_continuable", f"the events already sent cannot be read back: {exc}")
        if delivered is None:
            return given_up("not_continuable", "this stream keeps no record of what it sent")
        route = call.hints(request) or NO_HINTS
        if self.failed:
            route = replace(route, avoid=(*route.avoid, *self.failed))
        engines = run.relay.engines
        try:
            if self.extending:
                replay = await call.continuation.extend(delivered, engines=engines, route=route, request=request)
            else:
                replay = call.continuation.replay(delivered)
        except Failure as error:  # the engines it asked first failed
            return given_up("no_engine", error.message)
        if replay is None:
            return given_up("not_continuable", "the events already sent cannot be reproduced")
        try:
            new: EngineStream = await engines.open_stream(replay.path, replay.body, request=request, route=route)
            run.stream = new  # (a stop from here on closes it)
            refusal = await new.refusal()
        except Failure as error:
            return given_up("no_engine", error.message)
        if refusal is not None:
            return given_up("refused", refusal.message, new.engine.id if new.engine is not None else "none")
        engine_id = new.engine.id if new.engine is not None else "none"
        metrics.engine_continuations.labels(engine_id, DIVERGED_CONTINUED if diverged else "continued").inc()
        log.warning("stream continued from what was sent" if self.extending else "stream continued on another engine",
                    extra={"session_id": call.session_id, "engine": engine_id, "reason": cause,
                           "events_sent": len(delivered)})
        if run.stop_reason is not None:  # stopped while the new engine was answering
            new.close()
        rewind = getattr(run.tracker, "rewind", None)
        if rewind is not None:  # a tracker that holds an event back drops it: the replay sends its own
            rewind(len(delivered))
        return ReplayTracker(run.tracker, replay.filter), failure
