"""Start and stop the marketplace: database engine, migrations, demo data, gazetteer.

``start(app, settings)`` runs the migrations, opens the engine, seeds the demo
catalogue on a first start when ``SEED_DEMO_DATA`` is true (only into an
empty catalogue), loads the offline gazetteer and the search cursors' signing key, and keeps all of it on
``app.state.marketplace``; ``stop(app)`` closes the engine's connections.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, FastAPI, Request
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from gateway.config import Settings
from marketplace.cursor import CursorSigner, load_signer
from marketplace.db import create_engine, create_sessionmaker, migrate
from marketplace.gazetteer import Gazetteer
from marketplace.settings import MarketplaceSettings

log = logging.getLogger("marketplace")


@dataclass
class Marketplace:
    engine: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]
    gazetteer: Gazetteer
    cursors: CursorSigner
    settings: MarketplaceSettings


async def start(app: FastAPI, settings: Settings) -> None:
    await migrate(settings.database_url)
    engine = create_engine(settings.database_url)
    sessions = create_sessionmaker(engine)
    try:
        if settings.seed_demo_data:
            from marketplace.seed import seed_if_empty

            created = await seed_if_empty(session_factory=sessions)
            if created:
                log.info("seeded the demo catalogue", extra={"suppliers": created[0], "products": created[1]})
        gazetteer = await asyncio.to_thread(Gazetteer.load)
        cursors = await load_signer(sessions)
    except BaseException:
        await engine.dispose()
        raise
    app.state.marketplace = Marketplace(engine=engine, sessions=sessions, gazetteer=gazetteer, cursors=cursors,
                                        settings=MarketplaceSettings())


async def stop(app: FastAPI) -> None:
    marketplace = getattr(app.state, "marketplace", None)
    if marketplace is not None:
        app.state.marketplace = None
        await marketplace.engine.dispose()


def get_marketplace(request: Request) -> Marketplace:
    return request.app.state.marketplace


MarketplaceDep = Annotated[Marketplace, Depends(get_marketplace)]


async def get_session(marketplace: MarketplaceDep) -> AsyncIterator[AsyncSession]:
    async with marketplace.sessions() as session:
        yield session


SessionDep = Annotated[AsyncSession, Depends(get_session)]
