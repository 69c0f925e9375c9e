"""One client's event stream, as raw ASGI: start it, write bodies, keep it alive, notice it leave.

After the request body is read, an ASGI server's ``receive()`` only returns when the
client disconnects, so one watcher task per request waits on it (``http.disconnect``),
from before the engine answers until the stream ends, and ticks every keep-alive
interval: when a whole interval passed with nothing written, a ``: keep-alive`` comment
goes out, so proxies never see a silence longer than two intervals. Writing is a plain
``send`` per body: the stream's owner decides how much goes in one.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.types import Receive, Send

from gateway.http.context import RequestContext
from gateway.http.disconnect import DisconnectWatcher, nobody
from gateway.relay.sse import KEEPALIVE_FRAME, SSE_HEADERS


class ClientChannel:
    __slots__ = ("_send", "_body_send", "_receive", "_keepalive_seconds", "_watcher", "_written", "_seen", "started",
                 "closed")

    def __init__(self, send: Send, receive: Receive, *, keepalive_seconds: float,
                 body_send: Send | None = None) -> None:
        self._send = send
        # Body messages go straight to the server once the head went out (the request's ``server_send``:
        # one Python call less per body than through every wrapper; measured in bench/instructions.py).
        self._body_send = body_send or send
        self._receive = receive
        self._keepalive_seconds = keepalive_seconds
        self._watcher: DisconnectWatcher | None = None
        self._written = 0   # bodies written; the keep-alive tick compares it with what it saw last
        self._seen = -1
        self.started = False
        self.closed = False

    @classmethod
    def of(cls, request: RequestContext, *, keepalive_seconds: float, send: Send | None = None,
           receive: Receive | None = None) -> ClientChannel:
        """The channel to ``request``'s client (``send``/``receive``: those of an ASGI app in between, if any)."""
        return cls(send or request.send, receive or request.receive, keepalive_seconds=keepalive_seconds,
                   body_send=request.server_send)

    @property
    def head_send(self) -> Send:
        """Where the response start goes (an answer other than the stream, before it started: an error)."""
        return self._send

    @property
    def gone(self) -> bool:
        """The client disconnected."""
        return self._watcher is not None and self._watcher.disconnected

    def on_leave(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` when the client disconnects (at once if it already did)."""
        if self._watcher is None:
            self._watcher = DisconnectWatcher(self._receive, callback, tick_seconds=self._keepalive_seconds,
                                              on_tick=self._tick).start()
            return
        self._watcher.on_disconnect = callback
        if self._watcher.disconnected:
            callback()

    def ignore_leaving(self) -> None:
        """Keep noticing a disconnect (``gone``) but call nobody."""
        if self._watcher is not None:
            self._watcher.on_disconnect = nobody

    async def start(self, extra_headers: list[tuple[bytes, bytes]] = ()) -> None:
        """Send the SSE response head."""
        headers = [*SSE_HEADERS, *extra_headers] if extra_headers else SSE_HEADERS
        await self._send({"type": "http.response.start", "status": 200, "headers": headers})
        self.started = True

    async def write(self, body: bytes) -> None:
        if not self.closed and not self.gone:
            self._written += 1
            await self._body_send({"type": "http.response.body", "body": body, "more_body": True})

    async def close(self, tail: bytes = b"") -> None:
        """Write ``tail`` and end the response (nothing is written to a client that left)."""
        if self.closed:
            return
        self.closed = True
        self.stop_watching()
        if self.started and not self.gone:
            await self._body_send({"type": "http.response.body", "body": tail, "more_body": False})

    def stop_watching(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()

    async def _tick(self) -> None:
        if self._written == self._seen and self.started and not self.closed:  # nothing written since last tick
            await self._body_send({"type": "http.response.body", "body": KEEPALIVE_FRAME, "more_body": True})
        self._seen = self._written
