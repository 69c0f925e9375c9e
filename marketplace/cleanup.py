"""The periodic clean-up: personal data and credentials are not kept past their use.

Each worker runs a pass every ``MARKETPLACE_CLEANUP_INTERVAL_SECONDS``, the first one interval
after it started (each delay +-10 % at random, so workers and replicas drift out of step). A
pass deletes:

- end-user tokens that expired or were revoked (``users.tokens.delete_dead``);
- the tokens of keys that no longer act for users (removed from the configuration or moved to
  the read keys; a database key revoked, expired or made a read key), as the gateway's own auth
  says (``Gateway.key_acts_for_users``): such tokens are refused already, this takes them out
  of the database (a key store that cannot answer skips the pass: nothing is judged blind);
- conversations unused for ``MARKETPLACE_CONVERSATION_RETENTION_DAYS``, with their messages
  (``chat.conversations.delete_inactive``; 0 days: never).

Each kind deletes at most ``MARKETPLACE_CLEANUP_BATCH`` rows per pass, in a transaction of its
own, so no pass holds the database long however much has piled up; a pass that hit the bound
is followed by the next within ``FOLLOW_UP_SECONDS`` until the backlog is gone. Several workers
doing the same is harmless: deleting what another worker deleted deletes nothing. A database
that cannot serve skips the pass (reported as an outage, as a request would); any other failure
is logged and the next pass tries again. The clean-up never stops and never takes the
marketplace down. Erasing one user on request is ``DELETE /api/users/{id}`` (``users.service``).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.api import GatewayError
from marketplace.chat import conversations
from marketplace.database.availability import Availability, is_outage
from marketplace.database.tables import utcnow
from marketplace.errors import DatabaseUnavailable
from marketplace.settings import MarketplaceSettings
from marketplace.users import tokens

log = logging.getLogger("marketplace.cleanup")

FOLLOW_UP_SECONDS = 1.0
ISSUERS_MAX = 1000  # distinct keys that minted the stored tokens, checked per pass


@dataclass
class Pass:
    """What one pass deleted."""

    dead_tokens: int = 0      # expired or revoked
    orphan_tokens: int = 0    # minted by a key that no longer acts for users
    messages: int = 0         # of conversations past retention
    conversations: int = 0    # past retention, with no message left
    full: bool = False        # some kind hit the batch bound: more is waiting

    @property
    def deleted(self) -> int:
        return self.dead_tokens + self.orphan_tokens + self.messages + self.conversations


class Cleanup:
    def __init__(self, *, database: Callable[[], async_sessionmaker[AsyncSession]], availability: Availability,
                 key_acts_for_users: Callable[[str], Awaitable[bool]], settings: MarketplaceSettings) -> None:
        self._database = database  # the feature's: raises the 503 while the database is not up
        self._availability = availability
        self._key_acts_for_users = key_acts_for_users
        self._retention_days = settings.marketplace_conversation_retention_days
        self._interval = settings.marketplace_cleanup_interval_seconds
        self._batch = settings.marketplace_cleanup_batch
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="marketplace-cleanup")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def run_pass(self, *, now: datetime | None = None) -> Pass:
        """One pass over every kind (see the module docstring); raises what the database raises."""
        now = now or utcnow()
        db_factory, limit, done = self._database(), self._batch, Pass()
        async with db_factory() as db:
            done.dead_tokens = await tokens.delete_dead(db=db, now=now, limit=limit)
        async with db_factory() as db:
            issuers = await tokens.issuers(db=db, limit=ISSUERS_MAX)
        removed = [key_id for key_id in issuers if not await self._key_acts_for_users(key_id)]
        async with db_factory() as db:
            done.orphan_tokens = await tokens.delete_issued_by(db=db, key_ids=removed, limit=limit)
        if self._retention_days > 0:
            async with db_factory() as db:
                done.messages, done.conversations = await conversations.delete_inactive(
                    db=db, before=now - timedelta(days=self._retention_days), limit=limit)
        done.full = limit in (done.dead_tokens, done.orphan_tokens, done.messages, done.conversations)
        return done

    async def _run(self) -> None:
        delay = self._interval
        while True:
            await asyncio.sleep(delay * random.uniform(0.9, 1.1))
            delay = self._interval
            try:
                done = await self.run_pass()
            except DatabaseUnavailable:
                continue  # not up yet (or down): availability is already retrying
            except GatewayError as exc:  # the gateway's key store cannot answer: no token is judged meanwhile
                log.warning("a marketplace clean-up pass was skipped", extra={"problem": exc.message})
                continue
            except Exception as exc:  # one failed pass must never end the clean-up
                if is_outage(exc):
                    self._availability.failed(exc)
                else:
                    log.exception("a marketplace clean-up pass failed; the next one tries again")
                continue
            if done.deleted:
                log.info("marketplace clean-up", extra={"dead_tokens": done.dead_tokens,
                                                        "orphan_tokens": done.orphan_tokens,
                                                        "messages": done.messages, "conversations": done.conversations})
            if done.full:
                delay = min(self._interval, FOLLOW_UP_SECONDS)  # more is waiting
