"""A client following a generation it did not start (a resume), as raw ASGI.

Each wake-up sends everything available in ONE body message, so a client that fell
behind catches up in a few writes. The channel sends keep-alive comments (no id, no
index) when nothing was sent for ``SSE_KEEPALIVE_SECONDS``, and a client going away
interrupts the feed at once.
"""

from __future__ import annotations

import logging

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.http.context import request_context
from gateway.relay.channel import ClientChannel
from gateway.relay.dialect import StreamDialect
from gateway.relay.pump import joined
from gateway.sessions.ids import SESSION_HEADER
from gateway.sessions.persistence import FeedBroken

log = logging.getLogger("gateway.sessions")


class FollowerResponse(Response):
    def __init__(self, *, feed, start: int, session_id: str, keepalive_seconds: float,
                 dialect: StreamDialect) -> None:
        self.feed = feed
        self.start = start
        self.session_id = session_id
        self.keepalive_seconds = keepalive_seconds
        self.dialect = dialect
        self.status_code = 200
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        feed = self.feed
        channel = ClientChannel.of(request_context(scope), keepalive_seconds=self.keepalive_seconds, send=send,
                                   receive=receive)
        channel.on_leave(feed.interrupt)
        tail = b""
        try:
            await channel.start([(SESSION_HEADER, self.session_id.encode())])
            index = self.start
            while not channel.gone:
                read = await feed.next_frames(index)
                if not read:
                    break
                await channel.write(read[0] if len(read) == 1 else b"".join(read))
                index += len(read)
        except FeedBroken as exc:
            tail = joined(self.dialect.error_events(exc.message, exc.code))
        except Exception:
            log.exception("session stream failed", extra={"session_id": self.session_id})
            tail = joined(self.dialect.error_events("the gateway could not read this session", "session_unavailable"))
        finally:
            feed.close()
        await channel.close(tail)
