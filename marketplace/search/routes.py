"""The search part's routes: keyword search, natural-language search, comparison across suppliers.

Any API key may search. ``CursorsDep`` is the cursor signer the feature loaded from its
database (``search.cursor``).
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request

from gateway.api import PrincipalDep, request_id
from marketplace.catalogue.models import PRICE_MAX
from marketplace.database.requests import DatabaseRoute, DbDep
from marketplace.inputs import PAGE_LIMIT_MAX
from marketplace.places.routes import GazetteerDep
from marketplace.search import ai_search as ai_search_service
from marketplace.search.cursor import MAX_CHARS as CURSOR_MAX_CHARS
from marketplace.search.cursor import CursorSigner
from marketplace.search.listing import compare_offers, run_search, search_criteria_from_query
from marketplace.search.schemas import QUERY_MAX, SEARCH_OFFSET_MAX, AISearchOut, AISearchRequest, CompareOut, SearchOut
from marketplace.state import GatewayDep, SettingsDep, feature_of

router = APIRouter(prefix="/api", tags=["marketplace"], route_class=DatabaseRoute)  # outages: 503

Limit = Annotated[int, Query(ge=1, le=PAGE_LIMIT_MAX)]
SearchOffset = Annotated[int, Query(ge=0, le=SEARCH_OFFSET_MAX)]


async def get_cursors(request: Request) -> CursorSigner:
    return feature_of(request).cursors


CursorsDep = Annotated[CursorSigner, Depends(get_cursors)]


@router.get("/products/search")
async def search_products(
    _: PrincipalDep,
    db: DbDep,
    cursors: CursorsDep,
    q: Annotated[str, Query(max_length=QUERY_MAX)] = "",
    location: Annotated[str | None, Query(max_length=100, description="lat,lng")] = None,
    radius_km: Annotated[float | None, Query(gt=0, le=20_000)] = None,
    min_price: Annotated[int | None, Query(ge=0, le=PRICE_MAX)] = None,
    max_price: Annotated[int | None, Query(ge=0, le=PRICE_MAX)] = None,
    category: Annotated[str | None, Query(max_length=64)] = None,
    in_stock: bool = False,
    limit: Limit = 20,
    offset: SearchOffset = 0,
    sort: Literal["nearest", "price_asc", "price_desc"] = "nearest",
    fallback: bool = True,
    cursor: Annotated[str | None, Query(min_length=1, max_length=CURSOR_MAX_CHARS,
                                        description="next_cursor of the previous page (instead of offset)")] = None,
) -> SearchOut:
    """Keyword search; nearest first when ``location`` is given. ``fallback=false`` disables relaxing."""
    criteria = search_criteria_from_query(
        q=q, location=location, radius_km=radius_km, min_price=min_price, max_price=max_price,
        category=category, in_stock=in_stock, limit=limit, offset=offset, sort=sort,
    )
    return await run_search(db=db, signer=cursors, criteria=criteria, fallback=fallback, cursor=cursor)


@router.post("/products/ai-search")
async def ai_search(
    body: AISearchRequest, _: PrincipalDep, db: DbDep, cursors: CursorsDep, gateway: GatewayDep,
    settings: SettingsDep, gazetteer: GazetteerDep, request: Request,
) -> AISearchOut:
    """Natural-language search: the rules and the engine read the query into filters, searched like /search."""
    return await ai_search_service.run(
        db=db, signer=cursors, gateway=gateway, settings=settings,
        gazetteer=gazetteer, body=body, request_id=request_id(request),
    )


@router.get("/products/compare")
async def compare(
    _: PrincipalDep,
    db: DbDep,
    name: Annotated[str, Query(min_length=1, max_length=200)],
    location: Annotated[str | None, Query(max_length=100, description="lat,lng")] = None,
    in_stock: bool = True,
    sort: Literal["price", "distance"] = "price",
    limit: Limit = 20,
) -> CompareOut:
    """Each supplier's cheapest offer for a product name: cheapest first, or nearest first."""
    return await compare_offers(
        db=db, name=name, location=location, in_stock=in_stock, limit=limit, sort=sort
    )
