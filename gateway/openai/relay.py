"""Relay one request to the engine and its answer back, as raw ASGI.

Both responses are Starlette ``Response`` subclasses that do their work in
``__call__``, where they own ``receive`` (to notice a client disconnect at
once) and ``send`` (to start the response only when the engine has answered,
so an engine error still gets its proper HTTP status).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import orjson
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.auth import Principal
from gateway.disconnect import DisconnectWatcher
from gateway.errors import GatewayError, json_error_bytes
from gateway.metrics import Metrics
from gateway.upstream import UPSTREAM_SECONDS
from gateway.openai.prepare import PreparedRequest
from gateway.sse import DONE, DONE_FRAME, SEPARATOR, KeepAlive, SSEFramer, error_frame
from gateway.stream_result import StreamResult, StreamTracker
from gateway.upstream import UpstreamClient, UpstreamStream, parse_error_body

log = logging.getLogger("gateway.relay")

SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # tell nginx-style proxies not to buffer
]
JSON_HEADERS = [(b"content-type", b"application/json")]


@dataclass(slots=True)
class RelayContext:
    upstream: UpstreamClient
    metrics: Metrics
    principal: Principal
    request_id: str
    keepalive_seconds: float


async def send_json_error(scope: Scope, send: Send, error: GatewayError) -> None:
    body = json_error_bytes(scope["path"], error)
    headers = JSON_HEADERS + [(k.encode(), v.encode()) for k, v in error.headers.items()]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _absorb_late_cancel(task: asyncio.Task) -> None:
    """A disconnect that landed after the engine answered: take back its cancel request."""
    while task.cancelling():
        task.uncancel()


class RelayJSONResponse(Response):
    """A non-streamed completion: the engine's JSON answer, relayed byte for byte."""

    def __init__(self, prepared: PreparedRequest, ctx: RelayContext) -> None:
        self.prepared = prepared
        self.ctx = ctx
        self.status_code = 200
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ctx = self.ctx
        task = asyncio.current_task()
        # The upstream call runs in this task; a disconnect cancels it (one
        # watcher task per request, no second task for the call itself).
        watcher = DisconnectWatcher(receive, task.cancel).start()
        try:
            status, body = await ctx.upstream.request_bytes(
                "POST", self.prepared.path, self.prepared.body, request_id=ctx.request_id
            )
        except asyncio.CancelledError:
            if watcher.disconnected and task.uncancel() == 0:
                # The client left: the upstream request is closed, vLLM aborts.
                ctx.metrics.streams_ended.labels("client_disconnect").inc()
                return
            raise
        except GatewayError as exc:
            ctx.metrics.upstream_errors.labels(exc.code or str(exc.status)).inc()
            await send_json_error(scope, send, exc)
            return
        finally:
            watcher.stop()
        if watcher.disconnected:
            _absorb_late_cancel(task)
            ctx.metrics.streams_ended.labels("client_disconnect").inc()
            return
        if status >= 400:
            error = parse_error_body(status, body)
            if status >= 500:
                ctx.metrics.upstream_errors.labels("engine_error").inc()
            await send_json_error(scope, send, error)
            return
        if b'"usage"' in body:
            try:
                ctx.metrics.count_usage(ctx.principal.key_id, orjson.loads(body).get("usage"))
            except (orjson.JSONDecodeError, AttributeError):
                pass
        await send({"type": "http.response.start", "status": status, "headers": JSON_HEADERS})
        await send({"type": "http.response.body", "body": body})


class PlainStreamResponse(Response):
    """A streamed completion relayed event by event as it arrives, never buffered.

    Closing the upstream response when the client goes away is what makes
    vLLM abort the generation. Errors after the stream started become an SSE
    error event followed by ``[DONE]``, never a silently truncated stream.
    """

    def __init__(
        self,
        prepared: PreparedRequest,
        ctx: RelayContext,
        on_complete: Callable[[StreamResult], Awaitable[None]] | None = None,
    ) -> None:
        self.prepared = prepared
        self.ctx = ctx
        self.on_complete = on_complete
        self.status_code = 200
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ctx = self.ctx
        tracker = StreamTracker(collect_text=self.on_complete is not None)
        stream = await self._open(scope, receive, send)
        if stream is None:
            return
        keepalive = KeepAlive(send)
        watcher = DisconnectWatcher(
            receive, stream.close, tick_seconds=ctx.keepalive_seconds, on_tick=keepalive.tick
        ).start()
        wants_usage = self.prepared.client_wants_usage
        framer = SSEFramer()
        saw_done = False
        failure: GatewayError | None = None
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        try:
            async for chunk in stream.iter_bytes():
                events = framer.feed(chunk)
                if not events:
                    continue
                out = []
                for event in events:
                    if event.startswith(DONE):
                        saw_done = True
                        out.append(DONE_FRAME)
                        continue
                    if tracker.observe(event) and not wants_usage:
                        continue  # the usage-only chunk, which this client did not ask for
                    out.append(event + SEPARATOR)
                if out:
                    await send({"type": "http.response.body", "body": b"".join(out), "more_body": True})
                    keepalive.sent += 1
        except GatewayError as exc:
            failure = exc
        except asyncio.CancelledError:
            stream.close()
            raise
        finally:
            watcher.stop()
            stream.close()

        result = tracker.result()
        if watcher.disconnected:
            result.how = "client_disconnect"
        elif failure is not None or not saw_done:
            message = failure.message if failure else "the inference engine ended the stream early"
            result.how, result.error = "error", message
            ctx.metrics.upstream_errors.labels("stream_broken").inc()
            tail = error_frame(message, code="stream_interrupted") + DONE_FRAME
            await send({"type": "http.response.body", "body": tail, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        ctx.metrics.streams_ended.labels(result.how).inc()
        ctx.metrics.count_usage(ctx.principal.key_id, result.usage or result.estimated_usage())
        if self.on_complete is not None:
            try:
                await self.on_complete(result)
            except Exception:
                log.exception("stream completion hook failed")

    async def _open(self, scope: Scope, receive: Receive, send: Send) -> UpstreamStream | None:
        """Open the upstream stream; answer the client with an error and return None on failure."""
        ctx = self.ctx
        started = time.perf_counter()
        task = asyncio.current_task()
        watcher = DisconnectWatcher(receive, task.cancel).start()
        try:
            stream = await ctx.upstream.open_stream(self.prepared.path, self.prepared.body, request_id=ctx.request_id)
        except asyncio.CancelledError:
            if watcher.disconnected and task.uncancel() == 0:
                ctx.metrics.streams_ended.labels("client_disconnect").inc()
                return None
            raise
        except GatewayError as exc:
            ctx.metrics.upstream_errors.labels(exc.code or str(exc.status)).inc()
            await send_json_error(scope, send, exc)
            return None
        finally:
            watcher.stop()
        if watcher.disconnected:
            _absorb_late_cancel(task)
            stream.close()
            ctx.metrics.streams_ended.labels("client_disconnect").inc()
            return None
        scope[UPSTREAM_SECONDS] += time.perf_counter() - started
        if stream.status >= 400:
            body = await stream.response.read()
            stream.close()
            await send_json_error(scope, send, parse_error_body(stream.status, body))
            return None
        return stream
