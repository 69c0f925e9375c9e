"""A small Redis client for the limiter: one pipelined connection, a deadline on every call.

Why not redis-py: measured in one run on this machine (bench/limits.py's first version), a
redis-py asyncio ``EVALSHA`` cost 51-75 us of the caller's CPU; this client, an
``asyncio.Protocol`` that writes each command at once and matches replies to a FIFO of
futures (hiredis parses them), 14-30 us. The commands of one turn of the event loop (the
check-and-reserves and settles of every request that reached that point meanwhile) are
written together at its end, in one system call instead of one each (docs/keys.md, "Cost"). Two calls per request
(check-and-reserve, settle) decide whether the limiter stays under its 50 us budget. Concurrent callers share the
connection: their commands are pipelined, which Redis answers in order.

What it needs and no more: ``redis://[:password@]host[:port][/db]`` (``rediss`` is refused:
put TLS in a sidecar), commands with bytes/str/int arguments, ``EVALSHA`` that loads a script
the server lost. Every failure is ``RedisUnavailable``: a refused or dropped connection, or a
reply later than ``timeout`` (the connection is then closed, failing the calls behind it, as
a server that does not answer in time is treated as down). Error replies are ``RedisReplyError``.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
from urllib.parse import unquote, urlsplit

import hiredis


class RedisUnavailable(Exception):
    """Redis could not be reached or did not answer in time."""


class RedisReplyError(Exception):
    """Redis answered with an error."""


def pack(args: tuple) -> bytes:
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        if isinstance(arg, str):
            arg = arg.encode()
        elif isinstance(arg, int):
            arg = b"%d" % arg
        parts.append(b"$%d\r\n%s\r\n" % (len(arg), arg))
    return b"".join(parts)


class _Protocol(asyncio.Protocol):
    def __init__(self, client: RedisClient) -> None:
        self.client = client
        self.reader = hiredis.Reader(replyError=RedisReplyError)
        self.waiting: collections.deque[asyncio.Future | None] = collections.deque()
        self.sent_at: collections.deque[float] = collections.deque()  # when each waiting call was sent
        self.transport: asyncio.Transport | None = None
        self.loop = asyncio.get_running_loop()
        self.watchdog: asyncio.TimerHandle | None = None
        # The commands sent during this turn of the loop, written together at its end (in the order
        # they were sent: the order of ``waiting``): one write (one system call) for many under load.
        self.unsent: list[bytes] = []

    def write_soon(self, command: bytes) -> None:
        if not self.unsent:
            self.loop.call_soon(self.flush)
        self.unsent.append(command)

    def flush(self) -> None:
        if self.unsent and self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(self.unsent))
        self.unsent.clear()

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        while (reply := self.reader.gets()) is not False:
            future = self.waiting.popleft()
            self.sent_at.popleft()
            if future is None:  # a command sent without waiting for its reply (``send_nowait``)
                if isinstance(reply, RedisReplyError):
                    self.client.failed_unawaited += 1
            elif not future.done():
                if isinstance(reply, RedisReplyError):
                    future.set_exception(reply)
                else:
                    future.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(RedisUnavailable("the connection to Redis was lost"))
        self.client._lost(self)

    def fail(self, error: Exception) -> None:
        if self.watchdog is not None:
            self.watchdog.cancel()
            self.watchdog = None
        self.sent_at.clear()
        self.unsent.clear()
        while self.waiting:
            future = self.waiting.popleft()
            if future is None:
                self.client.failed_unawaited += 1
            elif not future.done():
                future.set_exception(error)


class RedisClient:
    def __init__(self, url: str, *, timeout: float = 0.25) -> None:
        parts = urlsplit(url)
        if parts.scheme != "redis":
            raise ValueError(f"REDIS_URL: only redis:// URLs are supported (got {parts.scheme}://)")
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 6379
        self.password = unquote(parts.password) if parts.password else None
        self.username = unquote(parts.username) if parts.username else None
        self.db = int(parts.path.lstrip("/") or 0)
        self.timeout = timeout
        self._protocol: _Protocol | None = None
        self._connecting: asyncio.Task | None = None
        self._shas: dict[str, str] = {}
        self._heads: dict[tuple[str, int], bytes] = {}
        self.failed_unawaited = 0
        self.preload: list[str] = []  # scripts loaded on every new connection

    @property
    def connected(self) -> bool:
        return self._protocol is not None

    async def call(self, *args) -> object:
        return await self.send(pack(args))

    async def send(self, command: bytes) -> object:
        """Send one command already in RESP form (``pack``) and await its reply."""
        return await self._submit(self._protocol or await self._connect(), command)

    def submit(self, command: bytes) -> asyncio.Future | None:
        """Send ``command`` (RESP) and return the future of its reply: no coroutine of ours between the
        caller and the reply (the check-and-reserve of every limited request). None when not connected:
        ``send`` then (it connects)."""
        protocol = self._protocol
        return self._submit(protocol, command) if protocol is not None else None

    def _submit(self, protocol: _Protocol, command: bytes) -> asyncio.Future:
        future = protocol.loop.create_future()
        protocol.waiting.append(future)
        protocol.sent_at.append(protocol.loop.time())
        protocol.write_soon(command)
        if protocol.watchdog is None:
            protocol.watchdog = protocol.loop.call_later(self.timeout, self._watch, protocol)
        return future

    def send_nowait(self, command: bytes) -> None:
        """Send a command whose reply nobody awaits (it is read and dropped in turn); needs a connection.

        Like every command, written at the end of the loop's current turn with the others sent
        meanwhile. A failed one (an error reply, or lost with the connection) is counted in
        ``failed_unawaited``.
        """
        protocol = self._protocol
        if protocol is None:
            raise RedisUnavailable("not connected to Redis")
        protocol.waiting.append(None)
        protocol.sent_at.append(protocol.loop.time())
        protocol.write_soon(command)
        if protocol.watchdog is None:
            protocol.watchdog = protocol.loop.call_later(self.timeout, self._watch, protocol)

    async def reloaded(self, error: RedisReplyError, script: str, command: bytes) -> object:
        """The reply of the ``EVALSHA`` ``command`` of ``script`` that failed with ``error``: sent again once
        the script is loaded when the server lost it (``NOSCRIPT``: a restarted or flushed server), else
        ``error`` raised."""
        if not str(error).startswith("NOSCRIPT"):
            raise error
        await self.call(b"SCRIPT", b"LOAD", script)
        return await self.send(command)

    def evalsha_head(self, script: str, count: int) -> bytes:
        """``EVALSHA <sha>`` of ``script`` with ``count`` arguments to follow, in RESP (made once per pair)."""
        head = self._heads.get((script, count))
        if head is None:
            if len(self._heads) >= 1024:
                self._heads.clear()
            head = self._heads[(script, count)] = (b"*%d\r\n$7\r\nEVALSHA\r\n$40\r\n%s\r\n"
                                                   % (count + 2, self.sha(script).encode()))
        return head

    def sha(self, script: str) -> str:
        sha = self._shas.get(script)
        if sha is None:
            sha = self._shas[script] = hashlib.sha1(script.encode()).hexdigest()
        return sha

    def _watch(self, protocol: _Protocol) -> None:
        """One timer per connection, not per call: the oldest reply outstanding past the deadline drops it."""
        protocol.watchdog = None
        if not protocol.waiting:
            return
        overdue = protocol.sent_at[0] + self.timeout - protocol.loop.time()
        if overdue <= 0:
            self._drop(protocol, f"Redis did not answer within {self.timeout:g} s")
        else:
            protocol.watchdog = protocol.loop.call_later(overdue, self._watch, protocol)

    def _drop(self, protocol: _Protocol, why: str) -> None:
        if self._protocol is protocol:
            self._protocol = None
        protocol.fail(RedisUnavailable(why))
        if protocol.transport is not None:
            protocol.transport.abort()

    def _lost(self, protocol: _Protocol) -> None:
        if self._protocol is protocol:
            self._protocol = None

    async def _connect(self) -> _Protocol:
        if self._connecting is None:
            self._connecting = asyncio.ensure_future(self._open())
        connecting = self._connecting
        try:
            return await asyncio.shield(connecting)
        finally:
            if connecting.done() and self._connecting is connecting:
                self._connecting = None

    async def _open(self) -> _Protocol:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.timeout):
                _, protocol = await loop.create_connection(lambda: _Protocol(self), self.host, self.port)
        except (OSError, TimeoutError) as exc:
            raise RedisUnavailable(f"cannot connect to Redis at {self.host}:{self.port} "
                                   f"({type(exc).__name__})") from None
        self._protocol = protocol
        try:
            if self.password is not None:
                auth = (self.username, self.password) if self.username else (self.password,)
                await self.call(b"AUTH", *auth)
            if self.db:
                await self.call(b"SELECT", self.db)
            for script in self.preload:
                await self.call(b"SCRIPT", b"LOAD", script)
        except RedisReplyError as exc:
            self._drop(protocol, "Redis refused the connection's setup")
            raise RedisUnavailable(f"Redis refused the connection: {exc}") from None
        return protocol

    async def close(self) -> None:
        protocol, self._protocol = self._protocol, None
        if protocol is not None and protocol.transport is not None:
            protocol.flush()  # (the settles of this last turn still go)
            protocol.fail(RedisUnavailable("the client was closed"))
            protocol.transport.close()
