"""The marketplace feature's lifecycle: database engine, migrations, demo data, gazetteer, cursor key.

``start()`` runs the migrations, opens the database engine, seeds the demo catalogue on a
first start when ``SEED_DEMO_DATA`` is true (only into an empty catalogue), loads the
offline gazetteer and the search cursors' signing key (``marketplace.cursor``); ``stop()``
closes the engine's connections. The gateway keeps the feature on ``app.state.marketplace``;
the routes reach it through ``MarketplaceDep``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from gateway.api import Gateway
from marketplace.cursor import CursorSigner, load_signer
from marketplace.db import create_engine, create_sessionmaker, migrate
from marketplace.gazetteer import Gazetteer
from marketplace.settings import MarketplaceSettings

log = logging.getLogger("marketplace")


class Marketplace:
    name = "marketplace"

    def __init__(self, gateway: Gateway, settings: MarketplaceSettings, *, router: APIRouter) -> None:
        self.gateway = gateway
        self.settings = settings
        self.router = router
        self.database_url = settings.database_url(gateway.settings.database_url)
        self.engine: AsyncEngine | None = None
        self.db_sessions: async_sessionmaker[AsyncSession] | None = None
        self.gazetteer: Gazetteer | None = None
        self.cursors: CursorSigner | None = None

    async def start(self) -> None:
        await migrate(self.database_url)
        engine = create_engine(self.database_url)
        db_sessions = create_sessionmaker(engine)
        try:
            if self.settings.seed_demo_data:
                from marketplace.seed import seed_if_empty

                created = await seed_if_empty(session_factory=db_sessions)
                if created:
                    log.info("seeded the demo catalogue", extra={"suppliers": created[0], "products": created[1]})
            self.gazetteer = await asyncio.to_thread(Gazetteer.load)
            self.cursors = await load_signer(db_sessions)
        except BaseException:
            await engine.dispose()
            raise
        self.engine, self.db_sessions = engine, db_sessions

    async def stop(self) -> None:
        engine, self.engine = self.engine, None
        if engine is not None:
            await engine.dispose()

    def status(self) -> dict:
        return {"ready": self.engine is not None}


def get_marketplace(request: Request) -> Marketplace:
    return request.app.state.marketplace


MarketplaceDep = Annotated[Marketplace, Depends(get_marketplace)]


async def get_db_session(marketplace: MarketplaceDep) -> AsyncIterator[AsyncSession]:
    async with marketplace.db_sessions() as session:
        yield session


SessionDep = Annotated[AsyncSession, Depends(get_db_session)]
