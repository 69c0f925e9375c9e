"""The session manager's background chores: heartbeat, cancel requests, garbage collection.

One task per process, ticking every quarter second: it renews this replica's
heartbeat every third of ``SESSION_LEASE_SECONDS``, picks up cancel requests
made on other processes (a flag in the store; PostgreSQL also pushes them by
NOTIFY), and collects garbage every ``SESSIONS_TTL_SECONDS / 10`` (1 to 60 s).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.streams.manager import SessionManager

log = logging.getLogger("gateway.streams")

TICK_SECONDS = 0.25


async def maintain(manager: "SessionManager") -> None:
    """Run the chores forever (cancelled at shutdown)."""
    store = manager.store
    gc_every = min(60.0, max(1.0, manager.settings.sessions_ttl_seconds / 10))
    tick = min(TICK_SECONDS, manager.check_interval)
    next_beat = next_gc = 0.0
    while True:
        now = time.monotonic()
        try:
            if store is not None:
                if now >= next_beat:
                    next_beat = now + manager.check_interval
                    await store.heartbeat()
                if manager.producing:
                    for gen_id in await store.pending_cancels():
                        manager.cancel_requested_elsewhere(gen_id)
            if now >= next_gc:
                next_gc = now + gc_every
                await manager.collect_garbage()
        except Exception:
            log.exception("session maintenance failed")
        await asyncio.sleep(tick)
