"""The request head's two bounds, which uvicorn's httptools protocol does not have: its size and its time.

uvicorn (httptools) keeps a request's URL and headers in memory until the head is complete,
however large, and waits for it however long: one client could send hundreds of megabytes
of headers into the gateway's memory on one connection, or hold ``MAX_CONNECTIONS``
connections open by sending a head a byte at a time (slow-loris) until uvicorn answers every
newcomer with 503. (uvicorn's h11 protocol bounds the size, not the time; httptools neither.)

:class:`BoundedHttpToolsProtocol` is uvicorn's protocol with both:

- a head (request line and headers) over ``REQUEST_HEAD_MAX_BYTES`` is answered 431 (Request
  Header Fields Too Large) and the connection closed, as soon as the bytes counted pass the
  bound (nginx answers 400 or 414 past its 8 KB buffers; Node.js 431 past 16 KB);
- a head not complete ``REQUEST_HEAD_TIMEOUT_SECONDS`` after its first byte (or, on a new
  connection, after the connection opened) is answered 408 (Request Timeout) and the
  connection closed; a new connection that sent nothing at all is closed without an answer
  (nginx's ``client_header_timeout``). Once the head is complete the body and the answer take
  as long as they take: that is admission's and the routes' business.

The served gateway (``gateway.cli``) runs with it; ``configure`` sets the bounds from the
settings in each serving process (``gateway.app.create_served_app``).
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol


class HeadTooLarge(Exception):
    """Raised from a parser callback to stop parsing a head over the bound."""


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    max_head_bytes: int = 64 * 1024
    head_timeout: float = 30.0

    @classmethod
    def configure(cls, *, max_head_bytes: int, head_timeout: float) -> None:
        cls.max_head_bytes = max_head_bytes
        cls.head_timeout = head_timeout

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._head_bytes = 0  # the current head's URL and headers parsed so far
        self._head_received = 0  # bytes received while the current head was incomplete
        self._head_started = False  # a byte of the current request's head has arrived, not yet its end
        self._head_timer: asyncio.TimerHandle | None = None
        self._refusal: tuple[int, str] | None = None

    # --- time ---

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_timer = self.loop.call_later(self.head_timeout, self._head_timed_out)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_bytes = self._head_received = 0
        self._head_started = True
        if self._head_timer is None:  # (a new connection's first request: armed when it opened)
            self._head_timer = self.loop.call_later(self.head_timeout, self._head_timed_out)

    def on_headers_complete(self) -> None:
        self._head_started = False
        self._cancel_head_timer()
        super().on_headers_complete()

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        busy = self.cycle is not None and not self.cycle.response_complete
        if not self._head_started or busy:  # nothing asked yet, or an answer still being written
            self.transport.close()
            return
        self._refuse(408, f"the request head was not complete within {self.head_timeout:g} s "
                          "(REQUEST_HEAD_TIMEOUT_SECONDS)")

    # --- size ---

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        # httptools keeps a header's value (and a name) to itself until it is complete: what it
        # holds is bounded here, what it handed over by on_url and on_header below.
        if self._head_started and self._refusal is None and not self.transport.is_closing():
            self._head_received += len(data)
            if self._head_received > self.max_head_bytes:
                self._refuse(431, self._too_large())

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)  # ": " and CRLF
        super().on_header(name, value)

    def _count(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > self.max_head_bytes:
            self._refusal = (431, self._too_large())
            raise HeadTooLarge  # the parser stops; uvicorn's data_received answers through send_400_response

    def _too_large(self) -> str:
        return f"the request head is over {self.max_head_bytes} bytes (REQUEST_HEAD_MAX_BYTES)"

    def send_400_response(self, msg: str) -> None:
        refusal, self._refusal = self._refusal, None
        if refusal is None:
            super().send_400_response(msg)
        else:
            self._refuse(*refusal)

    def _refuse(self, status: int, message: str) -> None:
        self._cancel_head_timer()
        body = message.encode("ascii")
        self.transport.write(b"".join([
            STATUS_LINE[status], b"content-type: text/plain; charset=utf-8\r\n",
            b"content-length: ", str(len(body)).encode("ascii"), b"\r\n", b"connection: close\r\n\r\n", body]))
        self.transport.close()
