"""Delivering the outbox: due rows claimed under a lease, posted signed, retried with exponential backoff.

Any replica may deliver: a row is claimed by a conditional update (its lease), so two replicas
never post the same attempt, and a replica that dies mid-delivery leaves a lease that runs
out and another takes the row. A receiver's 2xx marks the row delivered; anything else (an
error status, a timeout, a refused connection) schedules the next attempt after
``WEBHOOK_BACKOFF_SECONDS`` x 2^(attempts-1) (capped at an hour), up to
``WEBHOOK_MAX_ATTEMPTS``; a destination the allow-list refuses fails at once. At most
``WEBHOOK_CONCURRENCY`` posts are in flight, each bounded by ``WEBHOOK_TIMEOUT_SECONDS``: a slow
receiver holds one slot, never a request. Finished rows (delivered or failed) are removed once
they are older than ``JOBS_RETENTION_SECONDS`` (``prune``), so the outbox holds what is pending
plus what that period published.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time

import aiohttp
import sqlalchemy as sa

from gateway.database.tables.jobs import webhook_endpoints, webhook_outbox
from gateway.jobs.store import JobsDatabase, StoreUnavailable
from gateway.webhooks import signing
from gateway.webhooks.destinations import (
    CheckingResolver,
    DestinationRefused,
    Network,
    address_allowed,
    check_url,
    literal_address,
)

log = logging.getLogger("gateway.webhooks")

MAX_BACKOFF_SECONDS = 3600.0
PRUNE_EVERY_SECONDS = 60.0  # finished rows past the retention removed this often (or each retention, if shorter)
PRUNE_ROWS = 500  # at most this many per round: a large backlog goes over several rounds, never one long transaction
FINISHED = ("delivered", "failed")


class Deliverer:
    def __init__(self, db: JobsDatabase, *, allowed: list[Network], timeout: float, max_attempts: int,
                 backoff: float, concurrency: int, poll_seconds: float, retention_seconds: float,
                 replica: str | None = None) -> None:
        self.db = db
        self.retention_seconds = retention_seconds
        self._pruned = 0.0
        self.allowed = allowed
        self.timeout = timeout
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.concurrency = concurrency
        self.poll_seconds = poll_seconds
        self.replica = replica or secrets.token_hex(8)
        self.wake = asyncio.Event()
        self._slots = asyncio.Semaphore(concurrency)
        self._task: asyncio.Task | None = None
        self._inflight: set[asyncio.Task] = set()
        self._session: aiohttp.ClientSession | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="webhook-delivery")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for task in list(self._inflight):
            task.cancel()
        if self._inflight:
            await asyncio.gather(*self._inflight, return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(resolver=CheckingResolver(self.allowed), limit=self.concurrency,
                                             force_close=True)
            self._session = aiohttp.ClientSession(connector=connector, trust_env=False)
        return self._session

    async def _run(self) -> None:
        await self.db.opened.wait()
        while True:
            try:
                await self._deliver_due()
                now = time.time()
                if now - self._pruned >= min(PRUNE_EVERY_SECONDS, self.retention_seconds):
                    self._pruned = now
                    await self.prune(now - self.retention_seconds)
            except StoreUnavailable:
                pass
            except Exception:  # a bug must not end deliveries for good
                log.exception("webhook delivery round failed")
            self.wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), self.poll_seconds)

    async def _deliver_due(self) -> None:
        free = self.concurrency - len(self._inflight)
        if free <= 0:
            return
        now = time.time()
        async with self.db.begin() as connection:
            candidates = (await connection.execute(sa.select(webhook_outbox.c.id).where(
                webhook_outbox.c.state == "pending", webhook_outbox.c.next_attempt_at <= now,
                sa.or_(webhook_outbox.c.lease_until.is_(None), webhook_outbox.c.lease_until < now),
            ).order_by(webhook_outbox.c.next_attempt_at).limit(free))).scalars().all()
        for delivery_id in candidates:
            async with self.db.begin() as connection:
                claimed = (await connection.execute(sa.update(webhook_outbox).where(
                    webhook_outbox.c.id == delivery_id, webhook_outbox.c.state == "pending",
                    sa.or_(webhook_outbox.c.lease_until.is_(None), webhook_outbox.c.lease_until < now),
                ).values(lease_owner=self.replica, lease_until=now + self.timeout * 2 + 5))).rowcount
            if claimed:
                task = asyncio.create_task(self._deliver(delivery_id))
                self._inflight.add(task)
                task.add_done_callback(self._done)

    async def prune(self, before: float) -> int:
        """Remove up to ``PRUNE_ROWS`` finished deliveries created before ``before``; how many."""
        async with self.db.begin() as connection:
            gone = (await connection.execute(sa.select(webhook_outbox.c.id).where(
                webhook_outbox.c.state.in_(FINISHED), webhook_outbox.c.created_at < before,
            ).limit(PRUNE_ROWS))).scalars().all()
            if gone:
                await connection.execute(sa.delete(webhook_outbox).where(webhook_outbox.c.id.in_(gone)))
        return len(gone)

    def _done(self, task: asyncio.Task) -> None:
        self._inflight.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("webhook delivery failed: %s", type(task.exception()).__name__)
        self.wake.set()  # a slot is free: look for more

    async def _deliver(self, delivery_id: str) -> None:
        async with self._slots:
            async with self.db.begin() as connection:
                row = (await connection.execute(
                    sa.select(webhook_outbox.c.event_id, webhook_outbox.c.payload, webhook_outbox.c.attempts,
                              webhook_endpoints.c.url, webhook_endpoints.c.secret)
                    .select_from(webhook_outbox.outerjoin(
                        webhook_endpoints, webhook_endpoints.c.id == webhook_outbox.c.endpoint_id))
                    .where(webhook_outbox.c.id == delivery_id))).first()
            if row is None:
                return
            if row.url is None:
                await self._finish(delivery_id, row.attempts, status=None, error="endpoint deleted", final=True)
                return
            status, error, final = await self._post(row.url, row.secret, row.event_id, row.payload.encode())
            await self._finish(delivery_id, row.attempts, status=status, error=error,
                               final=final, delivered=status is not None and 200 <= status < 300)

    async def _post(self, url: str, secret: str, event_id: str, body: bytes) -> tuple[int | None, str | None, bool]:
        """(status, error, final): final when no retry can help (the destination is refused)."""
        try:
            host, _ = check_url(url)
            literal = literal_address(host)
            if literal is not None and not address_allowed(literal, self.allowed):
                raise DestinationRefused(f"{literal} is a private, loopback or link-local address")
            headers = signing.headers(secret, event_id, int(time.time()), body)
            async with self.session().post(url, data=body, headers=headers, allow_redirects=False,
                                           timeout=aiohttp.ClientTimeout(total=self.timeout)) as response:
                # The status is the answer; the body is never read: a receiver's body of any size
                # (or one that never ends) must not fill memory or hold the slot (the connection
                # is closed on leaving: force_close).
                return response.status, None if response.status < 300 else f"HTTP {response.status}", False
        except DestinationRefused as refused:
            return None, f"refused: {refused}"[:255], True
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            return None, type(exc).__name__, False

    async def _finish(self, delivery_id: str, attempts: int, *, status: int | None, error: str | None,
                      final: bool, delivered: bool = False) -> None:
        attempts += 1
        now = time.time()
        if delivered:
            values = {"state": "delivered", "delivered_at": now}
        elif final or attempts >= self.max_attempts:
            values = {"state": "failed"}
        else:
            delay = min(self.backoff * 2 ** (attempts - 1), MAX_BACKOFF_SECONDS)
            values = {"next_attempt_at": now + delay}
        async with self.db.begin() as connection:
            await connection.execute(sa.update(webhook_outbox).where(webhook_outbox.c.id == delivery_id).values(
                attempts=attempts, last_status=status, last_error=error, lease_owner=None, lease_until=None,
                **values))
