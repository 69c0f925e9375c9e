"""A stream relayed straight to one client: the plain relay, and the stream backend without sessions.

The engine's events go to the client as they arrive, one body per engine read, never
buffered. A client that leaves closes the engine request (vLLM aborts the generation).
Errors after the stream started become the dialect's in-band ending (for OpenAI: an error
event then ``[DONE]``), never a silently truncated stream.
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


class PlainStreamResponse(Response):
    def __init__(self, call: StreamCall, ctx: RelayContext) -> None:
        self.call = call
        self.ctx = ctx
        self.status_code = 200
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        call, ctx = self.call, self.ctx
        channel = ClientChannel(send, receive, keepalive_seconds=ctx.keepalive_seconds)
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
            ctx.metrics.streams_ended.labels("client_disconnect").inc()
            return
        tracker = call.dialect.tracker(relay_usage=call.relay_usage, collect_text=call.on_complete is not None)
        channel.on_leave(stream.close)  # the engine aborts the generation
        failure = None
        try:
            await channel.start()
            failure = await pump(stream, tracker, channel)  # each read's events: one body to the client
        except asyncio.CancelledError:
            channel.stop_watching()
            raise
        finally:
            stream.close()
        result = tracker.result()
        tail = b""
        if channel.gone:
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
