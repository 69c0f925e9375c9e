"""A non-streamed engine call relayed byte for byte, aborted when the client leaves.

The engine call runs in the request's own task; a disconnect cancels it (one watcher task
per request, no second task for the call), which closes the engine request so vLLM aborts
the generation instead of finishing it for nobody. The response starts only when the
engine has answered, so an engine error keeps its HTTP status.

A protocol that must read or change a successful answer before it goes out (store a
response object, count usage reported in its own field names) passes ``on_success``;
a body that is not JSON (a multipart upload) passes its ``content_type``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import orjson
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.engines.errors import parse_error_body
from gateway.engines.routing import RouteHints
from gateway.http.disconnect import DisconnectWatcher
from gateway.http.errors import GatewayError, send_error
from gateway.http.middleware import SERVER_SEND
from gateway.relay.context import RelayContext

JSON_HEADERS = [(b"content-type", b"application/json")]

# The engine's successful answer -> the body to send (may raise a GatewayError: nothing is sent yet).
SuccessHook = Callable[[bytes], Awaitable[bytes]]


class RelayJSONResponse(Response):
    def __init__(self, method: str, path: str, body: bytes | None, ctx: RelayContext, *,
                 count_usage: bool = True, route: RouteHints | None = None, content_type: str | None = None,
                 on_success: SuccessHook | None = None) -> None:
        self.method = method
        self.path = path
        self.body_out = body
        self.ctx = ctx
        self.count_usage = count_usage
        self.route = route
        self.content_type = content_type
        self.on_success = on_success
        self.status_code = 200
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ctx = self.ctx
        task = asyncio.current_task()
        watcher = DisconnectWatcher(receive, task.cancel).start()
        try:
            status, body = await ctx.engines.request_bytes(self.method, self.path, self.body_out,
                                                           request_id=ctx.request_id, route=ctx.route(self.route),
                                                           content_type=self.content_type)
        except asyncio.CancelledError:
            if watcher.disconnected and task.uncancel() == 0:
                ctx.metrics.stream_ended("client_disconnect")
                return  # the client left: the engine request is closed, vLLM aborts
            raise
        except GatewayError as error:
            ctx.metrics.upstream_errors.labels(error.code or str(error.status)).inc()
            await send_error(ctx.error_shape, error, send)
            return
        finally:
            watcher.stop()
        if watcher.disconnected:  # it left just as the engine answered: take back its cancel request
            while task.cancelling():
                task.uncancel()
            ctx.metrics.stream_ended("client_disconnect")
            return
        if status >= 400:
            if status >= 500:
                ctx.metrics.upstream_errors.labels("engine_error").inc()
            await send_error(ctx.error_shape, parse_error_body(status, body), send)
            return
        if self.count_usage and b'"usage"' in body:
            try:
                ctx.metrics.count_usage(ctx.key_id, orjson.loads(body).get("usage"))
            except (orjson.JSONDecodeError, AttributeError):
                pass
        if self.on_success is not None:
            try:
                body = await self.on_success(body)
            except GatewayError as error:
                await send_error(ctx.error_shape, error, send)
                return
        await send({"type": "http.response.start", "status": status, "headers": JSON_HEADERS})
        # The body straight to the server once the head went out, as streams do (``SERVER_SEND``).
        await scope.get(SERVER_SEND, send)({"type": "http.response.body", "body": body})
