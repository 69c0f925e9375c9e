"""A webhook receiver on a loopback port for tests: records every delivery, answers the statuses it is told."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from aiohttp import web


@dataclass
class Delivery:
    headers: dict[str, str]
    body: bytes


@dataclass
class WebhookReceiver:
    statuses: list[int] = field(default_factory=list)  # answered in turn; then 200
    deliveries: list[Delivery] = field(default_factory=list)
    url: str = ""
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    endless_body: bool = False  # answer with a body that never ends (what a hostile receiver may do)

    async def _receive(self, request: web.Request) -> web.StreamResponse:
        self.deliveries.append(Delivery({k.lower(): v for k, v in request.headers.items()}, await request.read()))
        self.arrived.set()
        status = self.statuses.pop(0) if self.statuses else 200
        if not self.endless_body:
            return web.Response(status=status)
        response = web.StreamResponse(status=status)
        await response.prepare(request)
        with contextlib.suppress(ConnectionError):
            while True:  # until the sender closes the connection
                await response.write(b"x" * 65536)
        return response

    async def wait_for(self, count: int, timeout: float) -> list[Delivery]:
        async with asyncio.timeout(timeout):
            while len(self.deliveries) < count:
                self.arrived.clear()
                await self.arrived.wait()
        return self.deliveries


@contextlib.asynccontextmanager
async def receiving(**kwargs) -> AsyncIterator[WebhookReceiver]:
    receiver = WebhookReceiver(**kwargs)
    app = web.Application()
    app.router.add_post("/hook", receiver._receive)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    site = web.SockSite(runner, sock)
    await site.start()
    receiver.url = f"http://127.0.0.1:{sock.getsockname()[1]}/hook"
    try:
        yield receiver
    finally:
        await runner.cleanup()
