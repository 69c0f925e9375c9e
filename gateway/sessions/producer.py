"""The request that starts a generation produces it: engine -> event log -> its own client, in one task.

The streaming core's loop (``relay.pump``) runs in this request's task with a sink that
frames each event once (``id: <session>:<index>``), appends whatever one engine read
completed to the generation's log as one batch (followers and the store writer read it
there) and writes the same bytes straight to this request's client. So the first client
of a session costs no more than a plain relay: no second task, no hop per event.

The generation outlives its client: when the client leaves, the sink stops writing to it
and the manager decides (a session nobody named stops at once; a named one gets
``CANCEL_AFTER_DISCONNECT_SECONDS``). The task keeps producing meanwhile, and keeps its
request's admission slot until the generation ends. The log always ends with an explicit
ending: the engine's own end, a cancelled generation, or an error, in the stream's dialect.
At the end it counts usage per API key (estimated for aborted streams) and runs the
caller's completion hook.

A stream that survives its engine: when the engine dies, stalls past the chunk timeout or
stops without its terminal event, and the call has a continuation (a reproducible run,
``relay.continuation``), the same loop goes on with a replay of the request on another engine
(at most ``ENGINE_MAX_ATTEMPTS - 1`` switches), through a filter that drops what the log
already holds: one log, contiguous indices, the same first client. When the replay produces
other text than the log holds, the loop goes on from exactly what the log holds instead (the
continuation's ``resume``), and so after every later switch of that stream. Nothing of this
costs anything per event until an engine fails (what was delivered is read back from the log
then). When no engine can continue, the log ends with the error event and ``[DONE]``.
Cancel and resume work across the switch: the new engine stream is the generation's stream
(a cancel closes it), and followers read the same log.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.engines.errors import ENDED_EARLY
from gateway.engines.routing import NO_HINTS
from gateway.engines.stream import EngineStream
from gateway.http.errors import GatewayError, send_error
from gateway.relay.channel import ClientChannel
from gateway.relay.context import RelayContext, StreamCall
from gateway.relay.continuation import ContinuationDiverged, ReplayTracker
from gateway.relay.dialect import StreamResult, StreamTracker
from gateway.relay.opening import open_watching
from gateway.relay.pump import pump, settle
from gateway.relay.sse import SEPARATOR, split_events
from gateway.sessions.frames import framed_block, frames
from gateway.sessions.generation import CLIENT_DISCONNECTED, FENCED, SHUTDOWN, STOP_HOW, Generation
from gateway.sessions.ids import SESSION_HEADER

log = logging.getLogger("gateway.sessions")

# Outcomes of a replay that produced other text than clients had (gateway_engine_continuations_total):
# the stream went on from exactly what clients had, or it could not and ended with the error event.
DIVERGED_CONTINUED = "diverged_continued"
DIVERGED = "diverged"


@dataclass(slots=True)
class ProducerHooks:
    """What the session manager does at a producer's milestones."""

    on_frames: Callable[[Generation], None]             # new frames in the log (the store writer)
    on_refused: Callable[[Generation], Awaitable[None]]  # the engine refused: forget it before answering
    on_client_left: Callable[[Generation], None]        # this request's client is gone (or done)
    on_end: Callable[[Generation], None]                # the log is closed
    # Events that left the log's ring, read back from the store (to continue a long stream elsewhere).
    read_evicted: Callable[[Generation, int], Awaitable[list[bytes]]] | None = None


class GenerationSink:
    """Frames events into the generation's log and writes them to the first client, if still there."""

    __slots__ = ("generation", "on_frames", "channel")

    def __init__(self, generation: Generation, on_frames: Callable[[Generation], None]) -> None:
        self.generation = generation
        self.on_frames = on_frames
        self.channel: ClientChannel | None = None

    async def write(self, block: bytes) -> None:
        generation = self.generation
        log_ = generation.log
        if block.find(SEPARATOR) == len(block) - 2:  # one event per engine read, the common case: no split
            framed = [framed_block(generation.prefix, log_.next_index, block)]
            body = framed[0]
            if generation.first_event is None:
                generation.first_event = block[:-2]
        else:
            events = split_events(block)
            if generation.first_event is None:
                generation.first_event = events[0]
            framed = frames(generation.prefix, log_.next_index, events)
            body = b"".join(framed)
        log_.append(framed)
        self.on_frames(generation)
        channel = self.channel
        if channel is not None:
            await channel.write(body)


class GenerationResponse(Response):
    def __init__(self, generation: Generation, call: StreamCall, ctx: RelayContext, hooks: ProducerHooks) -> None:
        self.generation = generation
        self.call = call
        self.ctx = ctx
        self.hooks = hooks
        self.status_code = 200
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        generation, call, ctx, hooks = self.generation, self.call, self.ctx, self.hooks
        generation.task = asyncio.current_task()
        tracker = call.dialect.tracker(relay_usage=call.relay_usage, collect_text=call.on_complete is not None,
                                       count_events=False)
        sink = GenerationSink(generation, hooks.on_frames)
        client_here = True

        def client_left() -> None:
            nonlocal client_here
            if client_here:
                client_here = False
                sink.channel = None
                hooks.on_client_left(generation)

        failure: GatewayError | None = None
        stream = None
        channel = ClientChannel(send, receive, keepalive_seconds=ctx.keepalive_seconds, scope=scope)
        try:
            try:
                stream = await open_watching(ctx.opener(call), channel, scope,
                                             abort_if_client_leaves=not generation.named)
            except GatewayError as error:
                channel.stop_watching()
                await self._refused(error, send)
                return
            if stream is None:  # the client left before the engine answered (a session nobody named)
                generation.stop_reason = CLIENT_DISCONNECTED
            elif generation.stop_reason is None:  # (or it was stopped while the engine was answering)
                generation.stream = stream
                await channel.start([(SESSION_HEADER, generation.session_id.encode())])
                sink.channel = channel
                channel.on_leave(client_left)
                failure = await pump(stream, tracker, sink)
                switches = 0
                failed: list[str] = []  # engines that broke this stream: not asked to continue it
                resuming = False        # a replay diverged: from then on, go on from what was sent
                while self._cut_short(stream, tracker, failure):
                    if call.continuation is None:
                        ctx.metrics.engine_continuations.labels("none", "not_continuable").inc()
                        break
                    diverged = isinstance(failure, ContinuationDiverged)
                    if not diverged:  # the engine failed (a diverged replay's engine is healthy)
                        if switches >= ctx.engines.max_attempts - 1:
                            break
                        switches += 1
                        if stream.engine is not None:
                            failed.append(stream.engine.id)
                    resuming = resuming or diverged
                    stream, replayed, failure = await self._continue(stream, tracker, failure, avoid=failed,
                                                                     resume=resuming, diverged=diverged)
                    if replayed is None:
                        break
                    failure = await pump(stream, replayed, sink)
        except asyncio.CancelledError:
            if generation.stop_reason is None:  # not a stop we asked for (server shutdown): end the log, obey
                await self._close(tracker, sink.channel, GatewayError(502, "the generation was interrupted",
                                                                      code="stream_interrupted"))
                client_left()
                raise
            asyncio.current_task().uncancel()
        except Exception:
            log.exception("session producer failed", extra={"session_id": generation.session_id})
            failure = GatewayError(502, "the gateway failed while relaying the stream", code="stream_interrupted")
        finally:
            channel.stop_watching()  # a client leaving from here on changes nothing
            if stream is not None:
                stream.close()
        if generation.live:
            await self._close(tracker, sink.channel, failure)
        client_left()

    def _cut_short(self, stream: EngineStream, tracker: StreamTracker, failure: GatewayError | None) -> bool:
        """Whether the engine failed the stream (not a stop the gateway asked for, not its end)."""
        if tracker.ended or self.generation.stop_reason is not None:
            return False
        if failure is None:  # the engine stopped without its terminal event
            stream.broke(ENDED_EARLY, "the inference engine ended the stream early")
        return True

    async def _continue(self, stream: EngineStream, tracker: StreamTracker, failure: GatewayError | None, *,
                        avoid: list[str], resume: bool, diverged: bool
                        ) -> tuple[EngineStream, ReplayTracker | None, GatewayError]:
        """The stream's continuation on another engine and its tracker; or no tracker and the failure to end with.

        ``resume``: go on from exactly what was delivered rather than replay the request;
        ``diverged``: ``stream`` is a replay that produced other text (its engine is healthy).
        """
        generation, call, ctx = self.generation, self.call, self.ctx
        cause = failure.message if failure is not None else "the inference engine ended the stream early"
        diverged_on = stream.engine.id if diverged and stream.engine is not None else "none"
        stream.close()
        generation.stream = None

        def given_up(outcome: str, why: str, engine: str = "none") -> tuple[EngineStream, None, GatewayError]:
            if diverged:  # the replay diverged and going on from what was sent failed too
                outcome, engine = DIVERGED, diverged_on
                message = f"{cause}; nor could it go on from what was already sent ({why})"
            else:
                message = f"{cause}; no other engine could continue the stream ({why})"
            ctx.metrics.engine_continuations.labels(engine, outcome).inc()
            log.warning("stream not continued", extra={"session_id": generation.session_id, "reason": why,
                                                       "outcome": outcome})
            return stream, None, GatewayError(502, message, code="stream_interrupted")

        try:
            delivered = await self._delivered()
        except Exception as exc:  # the log's head is gone (evicted, no store), or unreadable
            return given_up("not_continuable", f"the events already sent cannot be read back: {exc}")
        route = ctx.route(call.route) or NO_HINTS
        if avoid:
            route = replace(route, avoid=(*route.avoid, *avoid))
        try:
            if resume:
                replay = await call.continuation.resume(delivered, engines=ctx.engines, route=route,
                                                        request_id=ctx.request_id)
            else:
                replay = call.continuation.replay(delivered)
        except GatewayError as error:  # the engines it asked first failed
            return given_up("no_engine", error.message)
        if replay is None:
            return given_up("not_continuable", "the events already sent cannot be reproduced")
        try:
            new = await ctx.engines.open_stream(replay.path, replay.body, request_id=ctx.request_id, route=route)
            refusal = await new.refusal()
        except GatewayError as error:
            return given_up("no_engine", error.message)
        if refusal is not None:
            return given_up("refused", refusal.message, new.engine.id if new.engine is not None else "none")
        engine_id = new.engine.id if new.engine is not None else "none"
        ctx.metrics.engine_continuations.labels(engine_id, DIVERGED_CONTINUED if diverged else "continued").inc()
        log.warning("stream continued from what was sent" if resume else "stream continued on another engine",
                    extra={"session_id": generation.session_id, "engine": engine_id, "reason": cause,
                           "events_sent": generation.log.next_index})
        generation.stream = new
        if generation.stop_reason is not None:  # stopped while the new engine was answering
            new.close()
        return new, ReplayTracker(tracker, replay.filter), failure

    async def _delivered(self) -> list[bytes]:
        """Every event in the generation's log so far (from the store for those that left the ring)."""
        generation = self.generation
        log_ = generation.log
        earlier: list[bytes] = []
        while len(earlier) < log_.base:
            if self.hooks.read_evicted is None:
                raise RuntimeError("events left the ring and there is no store")
            batch = await self.hooks.read_evicted(generation, len(earlier))
            if not batch:
                raise RuntimeError(f"events from index {len(earlier)} are gone")
            earlier.extend(batch)
        return earlier[:log_.base] + log_.frames

    async def _refused(self, error: GatewayError, send: Send) -> None:
        """The engine refused or could not be reached: the client gets the HTTP error; nothing stays to resume."""
        generation, ctx = self.generation, self.ctx
        ctx.metrics.upstream_errors.labels(error.code or str(error.status)).inc()
        await self.hooks.on_refused(generation)
        # A follower may have attached meanwhile (a resume of a named session): end its stream too.
        generation.ended("error", frames(generation.prefix, 0, self.call.dialect.error_events(
            error.message, error.code or "upstream_error")))
        self.hooks.on_end(generation)
        await send_error(ctx.error_shape, error, send)
        self.hooks.on_client_left(generation)
        if self.call.on_complete is not None:  # the caller learns it ended, as for any other ending
            try:
                await self.call.on_complete(StreamResult(how="error", error=error.message))
            except Exception:
                log.exception("stream completion hook failed", extra={"session_id": generation.session_id})

    async def _close(self, tracker: StreamTracker, channel: ClientChannel | None,
                     failure: GatewayError | None) -> None:
        """End the log with the right ending, send it to the client, account for the stream."""
        generation, call, ctx = self.generation, self.call, self.ctx
        how, events, message = _ending(generation, tracker, failure)
        if how == "error" and generation.stop_reason is None:
            ctx.metrics.upstream_errors.labels("stream_broken").inc()
        logged = generation.log.next_index  # the engine's events (and what replaced them on another engine)
        framed = frames(generation.prefix, logged, events)
        generation.ended(how, framed)
        self.hooks.on_frames(generation)
        self.hooks.on_end(generation)
        if channel is not None:
            await channel.close(b"".join(framed))
        result = tracker.result()
        if result.content_events is None:  # not counted by the tracker: every logged event, for an estimate
            result.content_events = logged
        result.how = how
        if message is not None:
            result.error = message
        await settle(result, metrics=ctx.metrics, key_id=ctx.key_id, on_complete=call.on_complete,
                     context={"session_id": generation.session_id})


def _ending(generation: Generation, tracker: StreamTracker,
            failure: GatewayError | None) -> tuple[str, list[bytes], str | None]:
    """How the generation ended, the events that say so (after any already logged), the error if any."""
    if tracker.ended:
        return "completed", [], None
    dialect = generation.dialect
    reason = generation.stop_reason
    if reason == SHUTDOWN:
        message = "the gateway shut down during the generation"
        return "error", dialect.error_events(message, "gateway_shutdown"), message
    if reason == FENCED:
        message = "another gateway replica ended or replaced this generation"
        return "error", dialect.error_events(message, "producer_lost"), message
    if reason is not None:
        events = dialect.cancelled_events(first_event=generation.first_event, reason=reason,
                                          fallback_id=f"chatcmpl-{generation.request_id}",
                                          model=generation.model, choices=generation.choices)
        return STOP_HOW[reason], events, None
    message = failure.message if failure is not None else "the inference engine ended the stream early"
    return "error", dialect.error_events(message, "stream_interrupted"), message
