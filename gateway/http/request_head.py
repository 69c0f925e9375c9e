"""What uvicorn's httptools protocol does not bound: a request head's size and time, and a body's pace.

uvicorn (httptools) keeps a request's URL and headers in memory until the head is complete,
however large, and waits for the head and then the body however long: one client could send
hundreds of megabytes of headers into the gateway's memory on one connection, hold
``MAX_CONNECTIONS`` connections by sending heads a byte at a time (slow-loris) until uvicorn
answers every newcomer with 503, or, with any key or end-user token, hold its key's
``MAX_INFLIGHT_PER_KEY`` request slots (every other user of that key refused with 429) by
sending a head and then a body that never comes. (uvicorn's h11 protocol bounds the head's
size, not the time; httptools neither.)

:class:`BoundedHttpToolsProtocol` is uvicorn's protocol with these bounds:

- a head (request line and headers) over ``REQUEST_HEAD_MAX_BYTES`` is answered 431 (Request
  Header Fields Too Large) and the connection closed, as soon as the bytes counted pass the
  bound (nginx answers 400 or 414 past its 8 KB buffers; Node.js 431 past 16 KB);
- a head not complete ``REQUEST_HEAD_TIMEOUT_SECONDS`` after its first byte (or, on a new
  connection, after the connection opened) is answered 408 (Request Timeout) and the
  connection closed; a new connection that sent nothing at all is closed without an answer
  (nginx's ``client_header_timeout``);
- a body must arrive at a pace: within ``REQUEST_BODY_TIMEOUT_SECONDS`` of the head's end, plus
  one second per ``REQUEST_BODY_MIN_RATE`` bytes received (Apache's ``RequestReadTimeout
  body=20,MinRate=500``), else the request ends: 408 if nothing was answered yet, and the
  connection closed (the route sees the client leave). Time the gateway itself stops reading
  (a body its route has not taken yet), or keeps a client waiting for its ``100 Continue``,
  does not count.

Timers cost nothing on the common path: a head and body that arrive in one read (any small
JSON request) never arm one; a keep-alive connection's next request arms one only if its head
takes more than one read. The served gateway (``gateway.cli``) runs with this protocol;
``configure`` sets the bounds from the settings in each serving process
(``gateway.app.create_served_app``).
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol


class HeadTooLarge(Exception):
    """Raised from a parser callback to stop parsing a head over the bound."""


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    max_head_bytes: int = 64 * 1024
    head_timeout: float = 30.0
    body_timeout: float = 30.0
    body_min_rate: float = 500.0  # bytes per second

    @classmethod
    def configure(cls, *, max_head_bytes: int, head_timeout: float, body_timeout: float,
                  body_min_rate: float) -> None:
        cls.max_head_bytes = max_head_bytes
        cls.head_timeout = head_timeout
        cls.body_timeout = body_timeout
        cls.body_min_rate = body_min_rate

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._head_bytes = 0  # the current head's URL and headers parsed so far
        self._head_received = 0  # bytes received while the current head was incomplete
        self._head_started = False  # a byte of the current request's head has arrived, not yet its end
        self._body_bytes = 0  # the current request's body received so far
        self._body_since = 0.0  # when its head ended (the body's clock; time the gateway did not read excluded)
        self._timer: asyncio.TimerHandle | None = None  # the head's deadline, or the body's next check
        self._refusal: tuple[int, str] | None = None

    # --- when timers are armed: a new connection, and after a read that left a head or body incomplete ---

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._timer = self.loop.call_later(self.head_timeout, self._head_timed_out)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.transport.is_closing() or self._refusal is not None:
            return
        if self._head_started:  # the head is still incomplete after this read
            # httptools keeps a header's value (and a name) to itself until it is complete: what it
            # holds is bounded here, what it handed over by on_url and on_header below.
            self._head_received += len(data)
            if self._head_received > self.max_head_bytes:
                self._refuse(431, self._too_large())
            elif self._timer is None:
                self._timer = self.loop.call_later(self.head_timeout, self._head_timed_out)
            return
        cycle = self.cycle
        if self._timer is None and cycle is not None and cycle.more_body and not cycle.response_complete:
            self._body_since = self.loop.time()  # (the head ended in this read: its end, to a read's time)
            self._timer = self.loop.call_later(self.body_timeout, self._body_check)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # --- the head ---

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_bytes = self._head_received = 0
        self._head_started = True

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)  # ": " and CRLF
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._head_started = False
        self._cancel_timer()
        self._body_bytes = 0
        super().on_headers_complete()

    def _count(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > self.max_head_bytes:
            self._refusal = (431, self._too_large())
            raise HeadTooLarge  # the parser stops; uvicorn's data_received answers through send_400_response

    def _too_large(self) -> str:
        return f"the request head is over {self.max_head_bytes} bytes (REQUEST_HEAD_MAX_BYTES)"

    def _head_timed_out(self) -> None:
        self._timer = None
        if self.transport.is_closing():
            return
        if not self._head_started:  # a new connection that asked nothing
            self.transport.close()
            return
        if self.cycle is not None and not self.cycle.response_complete:
            # A pipelined head behind an answer still being written: that answer is not cut.
            self._timer = self.loop.call_later(self.head_timeout, self._head_timed_out)
            return
        self._refuse(408, f"the request head was not complete within {self.head_timeout:g} s "
                          "(REQUEST_HEAD_TIMEOUT_SECONDS)")

    # --- the body ---

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._cancel_timer()
        super().on_message_complete()

    def _body_check(self) -> None:
        self._timer = None
        cycle = self.cycle
        if self.transport.is_closing() or cycle is None or not cycle.more_body or cycle.response_complete:
            return
        now = self.loop.time()
        if self.flow.read_paused or cycle.waiting_for_100_continue:
            # The gateway is not reading (its route has not taken the body yet), or the client waits
            # for the 100 Continue its route's first read sends: not the client's time.
            self._body_since += self.body_timeout  # that time is not the client's
        else:
            allowed = self._body_since + self.body_timeout + self._body_bytes / self.body_min_rate
            if now < allowed:
                self._timer = self.loop.call_later(allowed - now, self._body_check)
                return
            self._end_slow_body(cycle)
            return
        self._timer = self.loop.call_later(self.body_timeout, self._body_check)

    def _end_slow_body(self, cycle) -> None:
        message = (f"the request body came slower than {self.body_min_rate:g} bytes a second after "
                   f"{self.body_timeout:g} s (REQUEST_BODY_TIMEOUT_SECONDS, REQUEST_BODY_MIN_RATE)")
        answered = cycle.response_started
        cycle.disconnected = True  # as if the client left: the route's receive says so, its answer goes nowhere
        cycle.message_event.set()
        if answered:
            self.transport.close()
        else:
            self._refuse(408, message)

    # --- answers of the protocol's own ---

    def send_400_response(self, msg: str) -> None:
        refusal, self._refusal = self._refusal, None
        if refusal is None:
            super().send_400_response(msg)
        else:
            self._refuse(*refusal)

    def _refuse(self, status: int, message: str) -> None:
        self._cancel_timer()
        self._head_started = False
        body = message.encode("ascii")
        self.transport.write(b"".join([
            STATUS_LINE[status], b"content-type: text/plain; charset=utf-8\r\n",
            b"content-length: ", str(len(body)).encode("ascii"), b"\r\n", b"connection: close\r\n\r\n", body]))
        self.transport.close()
