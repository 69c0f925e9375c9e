"""One generation of a session: its event log, the run producing it, the clients following it.

A session id names the latest generation of a conversation stream; a new POST with the
same (finished) id starts a new generation with a new log. Sessions are keyed by (API key
id, session id): another key's session with the same name is simply another session.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass

from gateway.relay.dialect import StreamDialect
from gateway.relay.run import Run
from gateway.sessions.frames import id_prefix
from gateway.sessions.log import EventLog
from gateway.sessions.store.base import ENDED, LIVE


def new_generation_id() -> int:
    """A random positive 63-bit id: the store's key for this generation's events."""
    return secrets.randbits(63) or 1


@dataclass(frozen=True, slots=True)
class SessionKey:
    owner: str       # Principal.key_id of the API key that created the session
    session_id: str


class Generation:
    def __init__(self, key: SessionKey, *, named: bool, ring_size: int, persistent: bool,
                 dialect: StreamDialect, choices: int = 1, model: object = None, request_id: str = "") -> None:
        self.key = key
        self.gen_id = new_generation_id()
        self.named = named  # the client named it: it survives disconnects for a while
        self.detached = False  # produced for nobody in particular (a background run): never stopped for lack of clients
        self.counted_live = False  # counted in its owner's live sessions (until it ends)
        self.on_no_longer_live = None  # releases what it holds once it ends (a detached run's admission slot)
        self.prefix = id_prefix(key.session_id)
        self.log = EventLog(ring_size, persistent=persistent)
        self.dialect = dialect
        self.state = LIVE
        self.how: str | None = None
        self.stop_reason: str | None = None
        self.consumers = 0
        self.run: Run | None = None  # the run producing it (its engine stream, its task)
        self.trace = None  # its request's trace (``gateway.tracing``), if traced: the store writer's events
        self.disconnect_timer: asyncio.TimerHandle | None = None
        self.unanswered_since: float | None = None  # loop time the store first could not say who follows
        self.created_at = time.time()
        self.ended_at: float | None = None
        self.choices = choices
        self.model = model
        self.request_id = request_id
        self.first_event: bytes | None = None
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

    @property
    def task(self) -> asyncio.Task | None:
        """The task producing it (the starting request's, or a detached run's own)."""
        return self.run.task if self.run is not None else None

    def stop(self, reason: str) -> bool:
        """Stop the run producing it for ``reason`` (``relay.ending``); vLLM aborts at once."""
        if not self.live or self.stop_reason is not None:
            return False
        self.stop_reason = reason
        if self.run is not None:
            self.run.stop(reason)
        return True

    def ended(self, how: str, ending: list[bytes]) -> None:
        """Close the log with its last frames (``ending`` may be empty: the engine's end was logged)."""
        self.state = ENDED
        self.how = how
        self.ended_at = time.time()
        self.run = None  # (it refers to this generation: the pair must not outlive the request as a cycle)
        self.log.finish(ending)
