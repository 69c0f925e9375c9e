"""A POST made straight through an app's ASGI interface by a client that can leave mid-request.

An HTTP client library cannot say "the client left" at a chosen moment; this call can: its
``receive`` hands over the body, then waits until ``left`` is set and reports
``http.disconnect``, as a server does when the connection closes.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field


@dataclass
class LeavingCall:
    task: asyncio.Task                         # the app's handling of the request
    left: asyncio.Event                        # set it: the client has gone
    sent: list[dict] = field(default_factory=list)  # what the app sent back (start, body)


def post_then_leave(app, path: str, payload: bytes, headers: list[tuple[bytes, bytes]] = ()) -> LeavingCall:
    """Start POSTing ``payload`` (JSON) to ``path``; the returned call's ``left`` makes the client go."""
    left = asyncio.Event()
    inbox = [{"type": "http.request", "body": payload, "more_body": False}]
    sent: list[dict] = []

    async def receive() -> dict:
        if inbox:
            return inbox.pop(0)
        await left.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
             "root_path": "", "server": ("gateway", 80), "client": ("127.0.0.1", 5000),
             "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
                         *headers]}
    return LeavingCall(asyncio.create_task(app(scope, receive, send)), left, sent)
