"""The search part's request and response bodies: keyword search, ai-search, comparison."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, StrictBool, field_validator

from marketplace.catalogue.schemas import ProductOut
from marketplace.inputs import PAGE_LIMIT_MAX, Input
from marketplace.places.schemas import Location, location_from_text
from marketplace.search.cursor import MAX_CHARS as CURSOR_MAX_CHARS

QUERY_MAX = 500
# Deepest page reachable by offset: deeper pages are read with a cursor, which costs the same
# at any depth (an offset makes the database produce and drop every row before it).
SEARCH_OFFSET_MAX = 10_000


class Delivery(BaseModel):
    min_days: int
    max_days: int
    label: str


class SupplierSummary(BaseModel):
    id: int
    name: str
    business_name: str
    location: Location
    address: str


class SearchHit(BaseModel):
    product: ProductOut
    supplier: SupplierSummary
    distance_km: float | None = Field(description="WGS-84 geodesic distance (geopy), when a location is known")
    delivery: Delivery | None
    score: int = Field(description="text relevance: 3 per term in the name, 2 in the tags, 1 in the description")


class SearchOut(BaseModel):
    results: list[SearchHit]
    total: int = Field(description="matches, exact up to 1,000 (see total_exact)")
    total_exact: bool = Field(description="false: there are more matches than total says")
    limit: int
    offset: int = Field(description="rows before this page")
    next_cursor: str | None = Field(description="pass as cursor for the next page; null on the last page")
    location: Location | None
    radius_km: float | None = Field(description="the radius finally searched (null: unlimited)")
    terms: list[str]
    sort: str | None = Field(description="null: nearest first with a location, else by relevance")
    fallback: list[str] = Field(description="relaxations applied because the strict search found nothing")


class AISearchRequest(Input):
    query: str = Field(min_length=1, max_length=QUERY_MAX)
    location: Location | None = None
    radius_km: float | None = Field(None, gt=0, le=20_000)
    in_stock: StrictBool | None = Field(None, description="null: as the query says, else in stock only")
    limit: int = Field(20, ge=1, le=PAGE_LIMIT_MAX)
    offset: int = Field(0, ge=0, le=SEARCH_OFFSET_MAX)
    cursor: str | None = Field(None, min_length=1, max_length=CURSOR_MAX_CHARS,
                               description="next_cursor of the previous page (instead of offset)")

    _location = field_validator("location", mode="before")(location_from_text)


class AISearchOut(SearchOut):
    query: str
    parsed: dict[str, Any] = Field(description="the filters searched by, merged from the rules and the engine")
    sources: dict[str, str | None] = Field(
        description="per filter: request, rules, model, default, or null when absent")
    engine: dict[str, Any] = Field(description="the engine's reading: status, model, detail, elapsed_ms, rejected")


class Offer(BaseModel):
    product: ProductOut
    supplier: SupplierSummary
    distance_km: float | None
    delivery: Delivery | None


class CompareOut(BaseModel):
    name: str
    location: Location | None
    offers: list[Offer]
    cheapest_product_id: int | None
    nearest_product_id: int | None
    min_price: int | None
    max_price: int | None
