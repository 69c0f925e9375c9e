"""One generation of a session: its event log, its producer and the clients following it.

A session id names the latest generation of a conversation stream; a new
POST with the same (finished) id starts a new generation with a new log.
Sessions are keyed by (API key id, session id): another key's session with
the same name is simply another session.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass

from gateway.streams.frames import id_prefix
from gateway.streams.log import EventLog

LIVE = "live"
ENDED = "ended"

# Why a producer is asked to stop, and the StreamResult.how it ends with.
STOP_HOW = {
    "cancel_request": "cancelled",
    "client_disconnected": "client_disconnect",
    "disconnect_timeout": "client_disconnect",
    "shutdown": "error",
    "fenced": "error",
}


def new_generation_id() -> int:
    """A random positive 63-bit id: the store's key for this generation's events."""
    return secrets.randbits(63) or 1


@dataclass(frozen=True, slots=True)
class SessionKey:
    owner: str       # Principal.key_id of the API key that created the session
    session_id: str


class Session:
    def __init__(self, key: SessionKey, *, named: bool, ring_size: int, persistent: bool, choices: int = 1,
                 model: object = None, request_id: str = "") -> None:
        self.key = key
        self.gen_id = new_generation_id()
        self.named = named  # the client named it: it survives disconnects for a while
        self.prefix = id_prefix(key.session_id)
        self.log = EventLog(ring_size, persistent=persistent)
        self.state = LIVE
        self.how: str | None = None
        self.stop_reason: str | None = None
        self.consumers = 0
        self.task: asyncio.Task | None = None
        self.stream = None  # the open UpstreamStream while producing
        self.opened: asyncio.Future = asyncio.get_running_loop().create_future()
        self.disconnect_timer: asyncio.TimerHandle | None = None
        self.created_at = time.time()
        self.ended_at: float | None = None
        self.choices = choices
        self.model = model
        self.request_id = request_id
        self.first_event: bytes | None = None
        self.open_error = None  # the GatewayError if the engine refused the request
        # Store bookkeeping (used only with a persistent store).
        self.stored = False       # its row exists in the store
        self.ending_stored = False
        self.replaced = False     # a newer generation took the session id

    @property
    def session_id(self) -> str:
        return self.key.session_id

    @property
    def live(self) -> bool:
        return self.state == LIVE

    def attach(self) -> None:
        """A client starts following this generation."""
        self.consumers += 1
        if self.disconnect_timer is not None:
            self.disconnect_timer.cancel()
            self.disconnect_timer = None

    def detach(self) -> bool:
        """A client stops following; True when it was the last one."""
        self.consumers -= 1
        return self.consumers == 0

    def stop(self, reason: str) -> bool:
        """Ask the producer to stop for ``reason``; closing upstream makes vLLM abort at once."""
        if not self.live or self.stop_reason is not None:
            return False
        self.stop_reason = reason
        if self.stream is not None:
            self.stream.close()
        if self.task is not None and not self.task.done():
            self.task.cancel()
        return True
