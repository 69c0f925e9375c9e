"""A stream relayed straight to one client: the plain relay, and the stream backend without sessions.

The engine's events go to the client as they arrive, one body per engine read, never
buffered. A client that leaves closes the engine request (vLLM aborts the generation).
Errors after the stream started become the dialect's in-band ending (for OpenAI: an error
event then ``[DONE]``), never a silently truncated stream; so does a gateway that stops
(``LiveStreams.end_all``, from the drain), before the server cuts the connection.
"""

from __future__ import annotations

import asyncio

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.engines.errors import ENDED_EARLY
from gateway.http.errors import GatewayError, send_error
from gateway.relay.channel import ClientChannel
from gateway.relay.context import RelayContext, StreamCall
from gateway.relay.opening import open_watching
from gateway.relay.pump import joined, pump, settle

SHUTDOWN_MESSAGE = "the gateway shut down during the generation"


class LiveStreams:
    """The plain streams being relayed in this process, so a stopping gateway can end each explicitly."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task] = set()
        self.ending = False

    def add(self, task: asyncio.Task) -> None:
        self._tasks.add(task)

    def discard(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)

    def end_all(self) -> None:
        """Interrupt every stream; each ends with the ``gateway_shutdown`` error ending."""
        self.ending = True
        for task in list(self._tasks):
            task.cancel()

    def __len__(self) -> int:
        return len(self._tasks)


class PlainStreamResponse(Response):
    def __init__(self, call: StreamCall, ctx: RelayContext) -> None:
        self.call = call
        self.ctx = ctx
        self.status_code = 200
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        call, ctx = self.call, self.ctx
        channel = ClientChannel(send, receive, keepalive_seconds=ctx.keepalive_seconds, scope=scope)
        try:
            stream = await open_watching(ctx.opener(call), channel, scope)
        except GatewayError as error:
            channel.stop_watching()
            ctx.metrics.upstream_errors.labels(error.code or str(error.status)).inc()
            await send_error(ctx.error_shape, error, send)
            return
        except BaseException:
            channel.stop_watching()
            raise
        if stream is None:
            channel.stop_watching()
            ctx.metrics.stream_ended("client_disconnect")
            return
        tracker = call.dialect.tracker(relay_usage=call.relay_usage, collect_text=call.on_complete is not None)
        channel.on_leave(stream.close)  # the engine aborts the generation
        failure = None
        live, task = ctx.live_streams, asyncio.current_task()
        shut_down = False
        if live is not None:
            live.add(task)
        try:
            await channel.start()
            failure = await pump(stream, tracker, channel)  # each read's events: one body to the client
        except asyncio.CancelledError:
            if live is None or not live.ending or task.uncancel() > 0:
                channel.stop_watching()
                raise
            shut_down = True  # the drain ended it: the client gets the explicit ending below
        finally:
            if live is not None:
                live.discard(task)
            stream.close()
        result = tracker.result()
        tail = b""
        if shut_down and not channel.gone:
            result.how, result.error = "error", SHUTDOWN_MESSAGE
            tail = joined(call.dialect.error_events(SHUTDOWN_MESSAGE, "gateway_shutdown"))
        elif channel.gone:
            result.how = "client_disconnect"
        elif failure is not None or not tracker.ended:
            if failure is None:
                stream.broke(ENDED_EARLY, "the inference engine ended the stream early")
            message = failure.message if failure is not None else "the inference engine ended the stream early"
            result.how, result.error = "error", message
            ctx.metrics.upstream_errors.labels("stream_broken").inc()
            tail = joined(call.dialect.error_events(message, "stream_interrupted"))
        await channel.close(tail)
        await settle(result, metrics=ctx.metrics, key_id=ctx.key_id, on_complete=call.on_complete)


class PlainRelay:
    """The stream backend when resumable sessions are off: every stream is a plain relay."""

    resumable = False

    async def stream(self, call: StreamCall, ctx: RelayContext) -> Response:
        return PlainStreamResponse(call, ctx)
