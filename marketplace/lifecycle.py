"""The marketplace feature's lifecycle: database engine, migrations, demo data, gazetteer, cursor key.

``start()`` loads the offline gazetteer, then brings the database up: runs the migrations,
opens the database engine, seeds the demo catalogue on a first start when ``SEED_DEMO_DATA``
is true (only into an empty catalogue) and loads the search cursors' signing key
(``search.cursor``). A database that cannot serve does not stop the gateway: the feature
reads not ready, its database routes answer 503, and ``database.availability`` keeps
trying in the background until it is up. The periodic clean-up (``marketplace.cleanup``:
dead tokens, conversations past retention) starts with it. ``stop()`` ends both and closes
the engine's connections. The gateway keeps the feature on ``app.state.marketplace``; the parts' routes reach
what they need of it through the getters of ``marketplace.state`` (the gateway, the settings),
``database.requests`` (a database session per request, and outages as 503s),
``places.routes`` (the gazetteer) and ``search.routes`` (the cursor signer).
"""

from __future__ import annotations

import asyncio
import logging

from fastapi import APIRouter
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from gateway.api import Gateway, dispose_database_engine
from marketplace.catalogue.demo import seed_if_empty
from marketplace.cleanup import Cleanup
from marketplace.database.availability import Availability
from marketplace.database.engines import create_engine, create_sessionmaker, normalize_url
from marketplace.migrations.runner import migrate
from marketplace.places.gazetteer import Gazetteer
from marketplace.search.cursor import CursorSigner, load_signer
from marketplace.settings import MarketplaceSettings
from marketplace.users.tokens import UserTokens

log = logging.getLogger("marketplace")


class Marketplace:
    name = "marketplace"

    def __init__(self, gateway: Gateway, settings: MarketplaceSettings, *, router: APIRouter) -> None:
        self.gateway = gateway
        self.settings = settings
        self.router = router
        self.database_url = settings.database_url(gateway.settings.database_url)
        self.engine: AsyncEngine | None = None
        self.db_factory: async_sessionmaker[AsyncSession] | None = None
        self.gazetteer: Gazetteer | None = None
        self.cursors: CursorSigner | None = None
        self.token_authenticator = UserTokens(self)  # end-user tokens, asked by the gateway's middleware
        # Its engine call waits in the gateway's flow control; AI search is left to the caps: refused, it
        # falls back to its rules at once, which a search box wants more than a wait.
        self.queued_paths = frozenset({"/api/chat"})
        self.availability = Availability(bring_up=self._bring_up_database, probe=self._probe_database,
                                         retry_seconds=settings.marketplace_db_retry_seconds,
                                         retry_max_seconds=settings.marketplace_db_retry_max_seconds)
        self.cleanup = Cleanup(database=self.database, availability=self.availability,
                               key_acts_for_users=gateway.key_acts_for_users, settings=settings)

    async def start(self) -> None:
        normalize_url(self.database_url)  # an unsupported URL is a configuration error: refuse to start
        self.gazetteer = await asyncio.to_thread(Gazetteer.load)
        await self.availability.start(wait_seconds=self.settings.marketplace_db_start_wait_seconds)
        self.cleanup.start()

    async def stop(self) -> None:
        await self.cleanup.stop()
        await self.availability.stop()
        engine, self.engine = self.engine, None
        if engine is not None:
            await dispose_database_engine(engine)  # (bounded: a hung database must not hold the shutdown)

    def status(self) -> dict:
        return {"ready": self.availability.ready, **self.availability.status()}

    def database(self) -> async_sessionmaker[AsyncSession]:
        """The factory of database sessions, or the 503 to answer while the database is not up yet."""
        if self.db_factory is None:
            raise self.availability.unavailable()
        return self.db_factory

    async def _bring_up_database(self) -> None:
        await migrate(self.database_url)
        engine = create_engine(self.database_url)
        db_factory = create_sessionmaker(engine)
        try:
            if self.settings.seed_demo_data:
                created = await seed_if_empty(db_factory=db_factory)
                if created:
                    log.info("seeded the demo catalogue", extra={"suppliers": created[0], "products": created[1]})
            self.cursors = await load_signer(db_factory)
        except BaseException:
            await engine.dispose()
            raise
        self.engine, self.db_factory = engine, db_factory

    async def _probe_database(self) -> None:
        async with self.engine.connect() as connection:
            await connection.execute(text("SELECT 1"))
