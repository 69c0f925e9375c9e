"""An open streamed response from one engine: raw bytes as they arrive, and who is to blame when it breaks.

The stream knows its engine: closing it ends the gateway's count of requests open there, and a
read that fails (the engine died, or stayed silent past ``UPSTREAM_CHUNK_TIMEOUT``) reports the
engine to the fleet, which ejects it for a while, unless the gateway closed the stream itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import aiohttp

from gateway.engines.buffered_read import reader_of
from gateway.engines.engine import Engine
from gateway.engines.errors import (
    STALLED,
    EngineError,
    EngineHTTPError,
    EngineTimeout,
    parse_error_body,
    translate_client_error,
)
from gateway.engines.fleet import Fleet

# How long the end of a body may lag behind the protocol's terminal event (``reach_end``).
END_OF_BODY_SECONDS = 0.5


class EngineStream:
    """An open streamed response from one engine: raw bytes as they arrive."""

    __slots__ = ("response", "_read", "status", "engine", "_fleet", "closed", "_reported")

    def __init__(self, response: aiohttp.ClientResponse, chunk_timeout: float, engine: Engine | None = None,
                 fleet: Fleet | None = None, on_first_bytes: Callable[[], None] | None = None) -> None:
        """``on_first_bytes``: called once, when the first bytes of the body are read (time to first token)."""
        self.response = response
        self._read = reader_of(response.content, on_first_bytes)
        self.status = response.status
        self.engine = engine  # which engine streams it (the fleet counts its open requests)
        self._fleet = fleet
        self.closed = False
        self._reported = False
        # After the headers, the read timeout is the between-chunks silence limit, counted
        # from now: the timer armed by the last bytes received still ran the first-byte
        # timeout, so an engine that fell silent right after its first events would only be
        # noticed UPSTREAM_FIRST_BYTE_TIMEOUT later.
        if response.connection is not None and response.connection.protocol is not None:
            protocol = response.connection.protocol
            protocol.read_timeout = chunk_timeout
            protocol.start_timeout()

    # The streaming loop awaits the reader itself (one awaited call per read, no wrapper:
    # measured in bench/instructions.py) and turns these into the gateway's errors with
    # ``failure``.
    errors = (TimeoutError, aiohttp.ClientError, OSError)

    @property
    def readany(self):
        """``await stream.readany()``: the bytes that arrived since the last read; b"" at the end."""
        return self._read

    async def read(self) -> bytes:
        """``readany`` with its failure already translated (for callers off the hot path)."""
        try:
            return await self._read()
        except self.errors as exc:
            raise self.failure(exc) from exc

    async def reach_end(self) -> None:
        """After the protocol's terminal event: read on to the body's end, so the connection is kept.

        An engine writes the end of a chunked body (its last, empty chunk) after the terminal
        event, often in a packet of its own. aiohttp hands the connection back to its pool
        when it reads that end; a stream closed before it closes the connection, and the
        next request pays a new TCP connection (measured: a new socket per streamed request).
        A body that goes on after its terminal event, or does not end within
        ``END_OF_BODY_SECONDS``, is closed as before.

        The terminal event is also what makes the stream a request its engine served: it ends
        the engine's run of ejections. Its response headers do not: an engine whose API server
        answers while its engine core hangs (``/health`` still 200) sends headers and then
        nothing, and its ejections must grow, not start again at the shortest.
        """
        if self.engine is not None:
            self.engine.succeeded()
        if self.closed or self.response.content.is_eof():
            return
        try:
            async with asyncio.timeout(END_OF_BODY_SECONDS):
                more = await self._read()
        except (TimeoutError, *self.errors):
            more = None
        if more != b"":
            self.close()

    def failure(self, exc: BaseException) -> EngineError:
        """The gateway's error for a failed read; the engine is blamed unless the gateway closed the stream."""
        error = translate_client_error(exc)
        if isinstance(error, EngineTimeout):
            error = EngineTimeout(error.message, kind=STALLED)
        if not self.closed:  # (a stream the gateway closed itself fails its reads: not the engine's fault)
            self.broke(error.kind, error.message)
        return error

    def broke(self, kind: str, message: str) -> None:
        """The engine failed this stream (died, stalled, stopped early): it is ejected for a while."""
        if self._fleet is not None and self.engine is not None and not self._reported:
            self._reported = True
            self._fleet.failed(self.engine, kind, message)

    async def refusal(self) -> EngineHTTPError | None:
        """The engine's HTTP error when it refused the request (the stream is closed then)."""
        if self.status < 400:
            return None
        try:
            body = await self.response.read()
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise translate_client_error(exc) from exc
        finally:
            self.close()
        if self.status < 500 and self.engine is not None:  # it answered this request: it works
            self.engine.succeeded()
        return parse_error_body(self.status, body)

    def close(self) -> None:
        """Close the connection at once: the engine sees the disconnect and aborts."""
        if self.closed:
            return
        self.closed = True
        self.response.close()
        if self.engine is not None and self._fleet is not None:
            self.engine.inflight -= 1


class Refused:
    """A response already read and closed (a 503 relayed when no other engine could take the
    stream), shaped like the part of ``aiohttp.ClientResponse`` ``EngineStream`` uses."""

    connection = None

    def __init__(self, status: int, body: bytes) -> None:
        self.status = status
        self._body = body
        self.content = self

    async def read(self) -> bytes:
        return self._body

    async def readany(self) -> bytes:
        return b""

    def close(self) -> None:
        return None
