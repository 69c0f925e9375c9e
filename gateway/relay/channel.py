"""One client's event stream, as raw ASGI: start it, write bodies, keep it alive, notice it leave.

After the request body is read, an ASGI server's ``receive()`` only returns when the
client disconnects, so one watcher task per stream waits on it (``http.disconnect``) and
ticks every keep-alive interval: when a whole interval passed with nothing written, a
``: keep-alive`` comment goes out, so proxies never see a silence longer than two intervals.
Writing is a plain ``send`` per body: the stream's owner decides how much goes in one.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.types import Receive, Send

from gateway.http.disconnect import DisconnectWatcher
from gateway.relay.sse import KEEPALIVE_FRAME, SSE_HEADERS


class ClientChannel:
    __slots__ = ("_send", "_receive", "_keepalive_seconds", "_on_leave", "_watcher", "_written", "_seen", "closed")

    def __init__(self, send: Send, receive: Receive, *, keepalive_seconds: float,
                 on_leave: Callable[[], None]) -> None:
        self._send = send
        self._receive = receive
        self._keepalive_seconds = keepalive_seconds
        self._on_leave = on_leave
        self._watcher: DisconnectWatcher | None = None
        self._written = 0   # bodies written; the keep-alive tick compares it with what it saw last
        self._seen = -1
        self.closed = False

    @property
    def gone(self) -> bool:
        """The client disconnected."""
        return self._watcher is not None and self._watcher.disconnected

    async def start(self, extra_headers: list[tuple[bytes, bytes]] = ()) -> None:
        """Send the SSE response head and start watching the client."""
        headers = [*SSE_HEADERS, *extra_headers] if extra_headers else SSE_HEADERS
        await self._send({"type": "http.response.start", "status": 200, "headers": headers})
        self._watcher = DisconnectWatcher(self._receive, self._on_leave, tick_seconds=self._keepalive_seconds,
                                          on_tick=self._tick).start()

    async def write(self, body: bytes) -> None:
        if not self.closed and not self.gone:
            self._written += 1
            await self._send({"type": "http.response.body", "body": body, "more_body": True})

    async def close(self, tail: bytes = b"") -> None:
        """Write ``tail`` and end the response (nothing is written to a client that left)."""
        if self.closed:
            return
        self.closed = True
        if self._watcher is not None:
            self._watcher.stop()
        if not self.gone:
            await self._send({"type": "http.response.body", "body": tail, "more_body": False})

    def stop_watching(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()

    async def _tick(self) -> None:
        if self._written == self._seen and not self.closed:  # nothing written since the last tick
            await self._send({"type": "http.response.body", "body": KEEPALIVE_FRAME, "more_body": True})
        self._seen = self._written
