"""The sessions' background chores: heartbeat, cancel requests, garbage collection.

One task per process, ticking every quarter second: it renews this replica's heartbeat
every ``beat_every`` seconds (a third of ``SESSION_LEASE_SECONDS``), picks up cancel
requests made on other processes (a flag in the store; PostgreSQL also pushes them by
NOTIFY), and collects garbage every ``gc_every`` seconds.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from gateway.sessions.store.base import SessionStore

log = logging.getLogger("gateway.sessions")

TICK_SECONDS = 0.25
FAILURE_LOG_SECONDS = 60.0  # a store that stays down is logged once a minute, not four times a second


async def maintain(store: SessionStore | None, *, beat_every: float, gc_every: float, producing: Callable[[], bool],
                   on_cancel: Callable[[int], None], collect_garbage: Callable[[], Awaitable[None]]) -> None:
    """Run the chores forever (cancelled at shutdown)."""
    tick = min(TICK_SECONDS, beat_every)
    next_beat = next_gc = 0.0
    failing_since: float | None = None
    logged_at = 0.0
    while True:
        now = time.monotonic()
        try:
            if store is not None:
                if now >= next_beat:
                    next_beat = now + beat_every
                    await store.heartbeat()
                if producing():
                    for gen_id in await store.pending_cancels():
                        on_cancel(gen_id)
            if now >= next_gc:
                next_gc = now + gc_every
                await collect_garbage()
        except Exception as exc:
            if failing_since is None:
                failing_since = logged_at = now
                log.exception("session maintenance failed")
            elif now - logged_at >= FAILURE_LOG_SECONDS:
                logged_at = now
                log.error("session maintenance still failing",
                          extra={"seconds": round(now - failing_since), "error": repr(exc)[:200]})
        else:
            if failing_since is not None:
                log.warning("session maintenance recovered", extra={"seconds": round(now - failing_since)})
                failing_since = None
        await asyncio.sleep(tick)
