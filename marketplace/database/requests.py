"""The database as the parts' routes meet it: one session per request, and outages as 503s.

``DbDep`` opens a database session for the request from the running feature
(``marketplace.state``), or answers 503 while the database is not up yet. ``DatabaseRoute`` is
the route class of every router that reaches the database: an outage met while serving
(``database.availability.is_outage``) is reported to the feature's availability and answered
503 with ``Retry-After``, never a 500.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.routing import APIRoute
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.responses import Response

from marketplace.database.availability import is_outage
from marketplace.state import feature_of


async def get_db(request: Request) -> AsyncIterator[AsyncSession]:
    async with feature_of(request).database()() as db:
        yield db


DbDep = Annotated[AsyncSession, Depends(get_db)]


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
                availability = feature_of(request).availability
                availability.failed(exc)
                raise availability.unavailable() from exc

        return serve
