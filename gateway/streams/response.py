"""The SSE response of a session, as raw ASGI: a client following one generation.

It owns ``receive`` (a client going away detaches it at once) and ``send``:
each wake-up sends everything available in ONE body message, so a client that
fell behind catches up in a few writes. Keep-alive comments (no id, no index)
go out when nothing was sent for ``SSE_KEEPALIVE_SECONDS``. A new generation
first waits for the engine's response headers, so an engine that refuses the
request still gets its HTTP status (503/504/502/4xx) to the client.
"""

from __future__ import annotations

import asyncio
import logging
import time

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.disconnect import DisconnectWatcher
from gateway.upstream import UPSTREAM_SECONDS
from gateway.openai.relay import SSE_HEADERS, send_json_error
from gateway.sse import DONE_FRAME, KeepAlive, error_frame
from gateway.streams.feeds import FeedBroken
from gateway.streams.session import Session

log = logging.getLogger("gateway.streams")

SESSION_HEADER = b"x-session-id"


class SessionStreamResponse(Response):
    def __init__(self, *, feed, start: int, session_id: str, keepalive_seconds: float,
                 opening: Session | None = None) -> None:
        self.feed = feed
        self.start = start
        self.session_id = session_id
        self.keepalive_seconds = keepalive_seconds
        self.opening = opening
        self.status_code = 200
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            if self.opening is not None and not await self._engine_answered(scope, receive, send):
                return
            await self._follow(receive, send)
        finally:
            self.feed.close()

    async def _engine_answered(self, scope: Scope, receive: Receive, send: Send) -> bool:
        """Wait for the engine's headers; False if the client left or got the engine's error."""
        session = self.opening
        if not session.opened.done():
            started = time.perf_counter()
            gone = asyncio.get_running_loop().create_future()
            watcher = DisconnectWatcher(receive, lambda: gone.done() or gone.set_result(None)).start()
            try:
                await asyncio.wait((session.opened, gone), return_when=asyncio.FIRST_COMPLETED)
            finally:
                watcher.stop()
            scope[UPSTREAM_SECONDS] = scope.get(UPSTREAM_SECONDS, 0.0) + time.perf_counter() - started
            if not session.opened.done():
                return False
        if session.open_error is not None:
            await send_json_error(scope, send, session.open_error)
            return False
        return True

    async def _follow(self, receive: Receive, send: Send) -> None:
        feed = self.feed
        keepalive = KeepAlive(send)
        watcher = DisconnectWatcher(
            receive, feed.interrupt, tick_seconds=self.keepalive_seconds, on_tick=keepalive.tick
        ).start()
        headers = [*SSE_HEADERS, (SESSION_HEADER, self.session_id.encode())]
        tail = b""
        try:
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            index = self.start
            while not watcher.disconnected:
                frames = await feed.next_frames(index)
                if not frames:
                    break
                body = frames[0] if len(frames) == 1 else b"".join(frames)
                await send({"type": "http.response.body", "body": body, "more_body": True})
                index += len(frames)
                keepalive.sent += 1
        except FeedBroken as exc:
            tail = error_frame(exc.message, code=exc.code) + DONE_FRAME
        except Exception:
            log.exception("session stream failed", extra={"session_id": self.session_id})
            tail = error_frame("the gateway could not read this session", code="session_unavailable") + DONE_FRAME
        finally:
            watcher.stop()
        if not watcher.disconnected:
            await send({"type": "http.response.body", "body": tail, "more_body": False})
