"""The stream runner: one engine stream from opening to its ending, for any protocol and any sink.

Every streamed generation is a :class:`Run`: it opens the engine stream (or takes one already
open), pumps its events into its sink, goes on on another engine when its engine dies or
stalls (``relay.switch``), ends it the one way the rules say (``relay.ending``), in the
protocol's own events (its dialect), and settles it (usage per key, the caller's hook). What
differs between ways of streaming is only the sink and whether a client is there:

- a plain relay: the client's channel is the sink (``relay.plain``);
- a session: the session's event log is the sink, and the first client reads it as it is
  written (``sessions.sink``); followers read the log;
- a detached run (a background response; later a batch line): the log, and no client.

With a client, the runner watches it from the start: before the engine answers, a client
that leaves is its sink's business (``on_client_left``: a plain relay stops at once, and
vLLM aborts; a named session lives on); until the response head went out, an engine that
refuses is still an HTTP error in the route's shape. A run is stopped from outside with
:meth:`Run.stop` (a cancel, a drain, a client gone): the engine request is closed at once
and the stream gets its cancelled or error ending.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from gateway.engines.errors import ENDED_EARLY as ENDED_EARLY_KIND
from gateway.engines.stream import EngineStream
from gateway.failures import Failure, LimitReached
from gateway.http import queueing
from gateway.http.context import RequestContext
from gateway.http.errors import send_error
from gateway.http.timing import EngineWait
from gateway.relay import ending as E
from gateway.relay.call import Relay, StreamCall
from gateway.relay.channel import ClientChannel
from gateway.relay.dialect import StreamResult, StreamTracker
from gateway.relay.metering import admit_call, metered_sink, settle_call
from gateway.relay.pump import pump
from gateway.relay.refusals import count_failure, count_refusal
from gateway.relay.switch import Switches
from gateway.tracing import hooks as tracing

log = logging.getLogger("gateway.relay")


class RunSink(Protocol):
    """Where a run's events go."""

    counts_events: bool  # it counts the events itself (a log does), so the tracker need not
    first_event: bytes | None  # the stream's first event, once written (endings copy its ids)

    def attach(self, channel: ClientChannel) -> list[tuple[bytes, bytes]]:
        """The client's channel is about to start: write to it too; the extra response headers."""

    def detach(self) -> None:
        """The client left: stop writing to it."""

    async def write(self, block: bytes) -> None:
        """The whole events one engine read completed."""

    async def finish(self, ending: E.Ending) -> int:
        """Write the ending (after every event so far) and close the client's stream; the events written in all."""

    async def refused(self, error: Failure) -> None:
        """The engine refused the stream before anything was written (nothing stays to resume)."""

    async def delivered(self) -> list[bytes] | None:
        """Every event written so far, framed, for a continuation; None when the sink keeps none."""


class Run:
    __slots__ = ("call", "request", "relay", "sink", "channel", "stream", "tracker", "stop_reason", "task",
                 "done", "on_client_left", "_client_here")

    def __init__(self, call: StreamCall, request: RequestContext, relay: Relay, sink: RunSink, *,
                 channel: ClientChannel | None = None, stream: EngineStream | None = None,
                 on_client_left: Callable[[], None] | None = None) -> None:
        self.call = call
        self.request = request
        self.relay = relay
        self.sink = sink
        self.channel = channel
        self.stream = stream  # the engine stream, once open (a caller may hand over one already open)
        self.tracker: StreamTracker | None = None
        self.stop_reason: str | None = None
        self.task: asyncio.Task | None = None
        self.done = False
        # What a client leaving means (at most once): by default (None) the run stops and vLLM aborts.
        self.on_client_left = on_client_left
        self._client_here = channel is not None

    # --- from outside ------------------------------------------------------------------------
    def stop(self, reason: str) -> bool:
        """Stop for ``reason`` (``relay.ending``): the engine request is closed at once (vLLM aborts)."""
        if self.done or self.stop_reason is not None:
            return False
        self.stop_reason = reason
        if self.stream is not None:
            self.stream.close()
        if self.task is not None and not self.task.done():
            self.task.cancel()
        return True

    def _client_left(self) -> None:
        if self._client_here:
            self._client_here = False
            self.sink.detach()
            if self.on_client_left is None:
                self.stop(E.CLIENT_DISCONNECTED)
            else:
                self.on_client_left()

    # --- the run ----------------------------------------------------------------------------
    async def serve(self, channel: ClientChannel) -> None:
        """Run to the end with ``channel``'s client."""
        self.channel = channel
        self._client_here = True
        await self.run()

    async def run(self) -> None:
        """Run to the end (in the task that calls it: the request's own, or a detached run's)."""
        self.task = asyncio.current_task()
        call, sink, channel = self.call, self.sink, self.channel
        tracker = self.tracker = call.dialect.tracker(relay_usage=call.relay_usage,
                                                      collect_text=call.on_complete is not None,
                                                      count_events=not sink.counts_events,
                                                      finish_reason=tracing.recorded(self.request))
        tracing.stream_started(self.request, call)
        failure: Failure | None = None
        try:
            try:
                if self.stream is None and self.stop_reason is None:
                    await self._open()
            except Failure as error:
                if self.stop_reason is None:
                    await self._refused(error)
                    return
            self.sink = metered_sink(sink, self.request)  # a budget counted as the stream goes
            await self._start_client()
            if self.stop_reason is None:
                failure = await pump(self.stream, tracker, self.sink, call.before_end)
                if self._cut_short(failure):
                    failure = await Switches(self).go_on(failure)
        except asyncio.CancelledError:
            if self.stop_reason is None:  # not a stop the gateway asked for: end the stream, then obey
                await self._end(E.interrupted(E.INTERRUPTED))
                raise
            self.task.uncancel()
        except Exception:
            log.exception("stream failed in the gateway", extra={"path": call.path})
            failure = E.interrupted(E.GATEWAY_FAILED)
        finally:
            if channel is not None:
                channel.stop_watching()  # a client leaving from here on changes nothing
            if self.stream is not None:
                self.stream.close()
        await self._end(failure)

    async def _open(self) -> None:
        """Open the engine stream, watching the client meanwhile (the wait is the request's engine time)."""
        channel = self.channel
        if channel is not None:
            channel.on_leave(self._client_left)
        route = self.call.route
        self.call.body = await admit_call(self.request, self.relay.meter, self.call.path, self.call.body,
                                          stream=True, routed_model=route.model if route is not None else None)
        with EngineWait(self.request):
            stream = await queueing.open_stream(self.relay.flow, self.relay.engines, self.call.path, self.call.body,
                                                request=self.request, route=self.call.hints(self.request))
        self.stream = stream
        if self.stop_reason is not None:  # stopped while the engine was answering
            stream.close()
        elif stream.status >= 400:
            raise await stream.refusal()

    async def _start_client(self) -> None:
        """The response head, once the stream is open (or when a stopped run still has its client)."""
        channel = self.channel
        if channel is None or channel.started or not self._client_here:
            return
        headers = self.sink.attach(channel)
        channel.on_leave(self._client_left)
        await channel.start(headers)

    def _cut_short(self, failure: Failure | None) -> bool:
        """Whether the engine failed the stream (not a stop the gateway asked for, not its end)."""
        if self.tracker.ended or self.stop_reason is not None or isinstance(failure, LimitReached):
            return False  # (a budget spent mid-stream is no engine's fault: no continuation)
        if failure is None:  # the engine stopped without its terminal event
            self.stream.broke(ENDED_EARLY_KIND, E.ENDED_EARLY)
        return True

    async def _refused(self, error: Failure) -> None:
        """The engine refused or could not be reached: the client gets the HTTP error; nothing stays to resume."""
        self.done = True
        request, channel = self.request, self.channel
        count_failure(self.relay.metrics, error)  # the gateway's own refusals are no upstream errors
        if channel is not None:
            channel.stop_watching()
        queueing.release(request)
        await self.sink.refused(error)
        await settle_call(request, answered=False, failure=error)  # (no engine received it: its request too)
        if channel is not None and self._client_here and not channel.gone:
            await send_error(request.error_shape, error, channel.head_send)
        self._client_left()
        if self.call.on_complete is not None:  # the caller learns it ended, as for any other ending
            await _hook(self.call.on_complete, StreamResult(how="error", error=error.message), request)

    async def _end(self, failure: Failure | None) -> None:
        """The one ending: decided by the rules, written by the sink, settled."""
        if self.done:
            return
        self.done = True
        call, tracker, relay = self.call, self.tracker, self.relay
        completed = tracker.ended and not isinstance(failure, LimitReached)  # (a budget may cut the last read)
        result = tracker.result()
        ending = E.ending_of(call.dialect, completed=completed, stop_reason=self.stop_reason, failure=failure,
                             first_event=self.sink.first_event, run_id=self.request.request_id, model=call.model,
                             choices=call.choices, usage=result.counted_usage())
        if ending.how == "error" and self.stop_reason is None and not count_refusal(relay.metrics, failure):
            relay.metrics.upstream_errors.labels("stream_broken").inc()  # (a budget cut is the gateway's refusal)
        if self.channel is not None and self._client_here and not self.channel.started and ending.events:
            await self._start_client()  # stopped before the head went out, the client still there: tell it
        written = await self.sink.finish(ending)
        self._client_left()
        if result.content_events is None:  # not counted by the tracker: every event written, for an estimate
            result.content_events = written
        result.how = ending.how
        if ending.error is not None:
            result.error = ending.error
        relay.metrics.stream_ended(result.how)
        tracing.stream_ended(self.request, result, call, relay.metrics.genai)
        relay.metrics.count_usage(self.request.key_id, result.counted_usage())
        queueing.release(self.request, result.counted_usage())
        if self.stream is None:  # stopped before its engine stream opened (its client left while it was queued)
            await settle_call(self.request, answered=False)
        else:
            await settle_call(self.request, result.usage, model=call.model, estimated=result.counted_usage())
        if call.on_complete is not None:
            await _hook(call.on_complete, result, self.request)


async def _hook(hook, result: StreamResult, request: RequestContext) -> None:
    try:
        await hook(result)
    except Exception:
        log.exception("stream completion hook failed", extra={"request_id": request.request_id})
