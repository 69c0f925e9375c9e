"""The marketplace feature's lifecycle: database engine, migrations, demo data, gazetteer, cursor key.

``start()`` loads the offline gazetteer, then brings the database up: runs the migrations,
opens the database engine, seeds the demo catalogue on a first start when ``SEED_DEMO_DATA``
is true (only into an empty catalogue) and loads the search cursors' signing key
(``marketplace.cursor``). A database that cannot serve does not stop the gateway: the feature
reads not ready, its database routes answer 503, and ``marketplace.availability`` keeps
trying in the background until it is up. ``stop()`` ends that and closes the engine's
connections. The gateway keeps the feature on ``app.state.marketplace``; the routes reach it
through ``MarketplaceDep`` and their database sessions through ``SessionDep``; the routes'
class (:class:`DatabaseRoute`) turns an outage met during a request into that 503.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.routing import APIRoute
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from starlette.responses import Response

from gateway.api import Gateway
from marketplace.availability import Availability, is_outage
from marketplace.cursor import CursorSigner, load_signer
from marketplace.db import create_engine, create_sessionmaker, migrate, normalize_url
from marketplace.gazetteer import Gazetteer
from marketplace.settings import MarketplaceSettings
from marketplace.tokens import UserTokens

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
        self.token_authenticator = UserTokens(self)  # end-user tokens, asked by the gateway's middleware
        self.availability = Availability(bring_up=self._bring_up_database, probe=self._probe_database,
                                         retry_seconds=settings.marketplace_db_retry_seconds,
                                         retry_max_seconds=settings.marketplace_db_retry_max_seconds)

    async def start(self) -> None:
        normalize_url(self.database_url)  # an unsupported URL is a configuration error: refuse to start
        self.gazetteer = await asyncio.to_thread(Gazetteer.load)
        await self.availability.start(wait_seconds=self.settings.marketplace_db_start_wait_seconds)

    async def stop(self) -> None:
        await self.availability.stop()
        engine, self.engine = self.engine, None
        if engine is not None:
            await engine.dispose()

    def status(self) -> dict:
        return {"ready": self.availability.ready, **self.availability.status()}

    def database(self) -> async_sessionmaker[AsyncSession]:
        """The database sessions, or the 503 to answer while the database is not up yet."""
        if self.db_sessions is None:
            raise self.availability.unavailable()
        return self.db_sessions

    async def _bring_up_database(self) -> None:
        await migrate(self.database_url)
        engine = create_engine(self.database_url)
        db_sessions = create_sessionmaker(engine)
        try:
            if self.settings.seed_demo_data:
                from marketplace.seed import seed_if_empty

                created = await seed_if_empty(session_factory=db_sessions)
                if created:
                    log.info("seeded the demo catalogue", extra={"suppliers": created[0], "products": created[1]})
            self.cursors = await load_signer(db_sessions)
        except BaseException:
            await engine.dispose()
            raise
        self.engine, self.db_sessions = engine, db_sessions

    async def _probe_database(self) -> None:
        async with self.engine.connect() as connection:
            await connection.execute(text("SELECT 1"))


def get_marketplace(request: Request) -> Marketplace:
    return request.app.state.marketplace


MarketplaceDep = Annotated[Marketplace, Depends(get_marketplace)]


async def get_db_session(marketplace: MarketplaceDep) -> AsyncIterator[AsyncSession]:
    async with marketplace.database()() as session:
        yield session


SessionDep = Annotated[AsyncSession, Depends(get_db_session)]


class DatabaseRoute(APIRoute):
    """A marketplace route: a database outage met while serving it is a 503 with ``Retry-After``, never a 500."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def serve(request: Request) -> Response:
            try:
                return await handler(request)
            except Exception as exc:
                if not is_outage(exc):
                    raise
                availability = get_marketplace(request).availability
                availability.failed(exc)
                raise availability.unavailable() from exc

        return serve
