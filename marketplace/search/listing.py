"""Search results as API answers: keyword search, multi-supplier comparison, and the shared pieces.

AI search (``marketplace.search.ai_search``) and chat build on ``criteria_from_parsed`` and ``search_out``.
"""

from __future__ import annotations

from typing import Literal

from sqlalchemy import and_, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from marketplace.catalogue import taxonomy
from marketplace.catalogue.models import Product, Supplier
from marketplace.catalogue.schemas import ProductOut
from marketplace.errors import invalid_field
from marketplace.inputs import refuse_nul
from marketplace.places import geo
from marketplace.places.schemas import Location
from marketplace.search import paging
from marketplace.search.criteria import SearchCriteria, normalise_terms
from marketplace.search.cursor import CursorSigner
from marketplace.search.nearest import nearby_suppliers
from marketplace.search.schemas import CompareOut, Delivery, Offer, SearchHit, SearchOut, SupplierSummary
from marketplace.search.service import Hit, SearchPage, hits_for
from marketplace.search.textmatch import like_pattern

# A place named in a natural-language query means "around there".
NEARBY_RADIUS_KM = 50.0
PRICE_SORTS = ("price_asc", "price_desc")


def search_origin(*, named_place: geo.Point | None, request_location: geo.Point | None,
                  user_location: geo.Point | None = None) -> tuple[geo.Point | None, str | None]:
    """Where a natural-language search (chat, AI search) is centred, and what gave it.

    The one rule for both: a place named in the question wins over the location the request
    sends, which wins over the user's saved location. The second value says which won:
    ``"place"``, ``"request"``, ``"user"``, or None when there is no location at all.
    """
    for point, source in ((named_place, "place"), (request_location, "request"), (user_location, "user")):
        if point is not None:
            return point, source
    return None, None


def supplier_summary(supplier: Supplier) -> SupplierSummary:
    return SupplierSummary(
        id=supplier.id,
        name=supplier.name,
        business_name=supplier.business_name,
        location=Location(lat=supplier.lat, lng=supplier.lng),
        address=supplier.address,
    )


def hit_out(hit: Hit) -> SearchHit:
    return SearchHit(
        product=ProductOut.of(hit.product),
        supplier=supplier_summary(hit.supplier),
        distance_km=None if hit.distance_km is None else round(hit.distance_km, 3),
        delivery=None if hit.delivery is None else Delivery(**hit.delivery.as_dict()),
        score=hit.score,
    )


def location_param(value: str | None, *, field: str = "location") -> geo.Point | None:
    """A ``lat,lng`` query parameter as a point; 422 naming the parameter when malformed."""
    if value is None or value.strip() == "":
        return None
    try:
        return geo.parse_location(value)
    except ValueError as exc:
        raise invalid_field("query", field, str(exc)) from exc


def search_criteria_from_query(
    *,
    q: str,
    location: str | None,
    radius_km: float | None,
    min_price: int | None,
    max_price: int | None,
    category: str | None,
    in_stock: bool,
    limit: int,
    offset: int,
    sort: str | None = None,
) -> SearchCriteria:
    """The criteria of GET /api/products/search (its words are searched as they are)."""
    refuse_nul(q=q, category=category)
    category_path = None
    if category is not None and category.strip():
        try:
            category_path = taxonomy.resolve(category)
        except taxonomy.UnknownCategory as exc:
            raise invalid_field("query", "category", str(exc)) from exc
    point = location_param(location)
    if radius_km is not None and point is None:
        raise invalid_field("query", "radius_km", "radius_km needs a location (lat,lng)")
    if min_price is not None and max_price is not None and min_price > max_price:
        raise invalid_field("query", "max_price", "max_price must be at least min_price")
    return SearchCriteria(
        terms=normalise_terms(q.split()),
        min_price=min_price,
        max_price=max_price,
        category=category_path,
        location=point,
        radius_km=radius_km,
        in_stock=in_stock,
        limit=limit,
        offset=offset,
        sort=sort if sort in PRICE_SORTS else None,
    )


def criteria_from_parsed(
    parsed, *, location: geo.Point | None, radius_km: float | None, in_stock: bool, limit: int, offset: int = 0
) -> SearchCriteria:
    """The search a parsed natural-language query asks for (AI search and chat)."""
    return SearchCriteria(
        terms=normalise_terms([*parsed.terms, *parsed.tags]),
        min_price=parsed.min_price,
        max_price=parsed.max_price,
        category=parsed.category,
        category_includes_parent=parsed.category is not None,
        location=location,
        radius_km=(radius_km or parsed.radius_km or NEARBY_RADIUS_KM) if location is not None else None,
        in_stock=in_stock,
        limit=limit,
        offset=offset,
        sort=parsed.sort if parsed.sort in PRICE_SORTS else None,  # "nearest" is the default anyway
    )


def search_out(page: SearchPage, *, next_cursor: str | None) -> dict:
    criteria = page.criteria
    location = criteria.location
    return dict(
        results=[hit_out(hit) for hit in page.hits],
        total=page.total,
        total_exact=page.total_exact,
        limit=criteria.limit,
        offset=page.offset,
        next_cursor=next_cursor,
        location=None if location is None else Location(lat=location.lat, lng=location.lng),
        radius_km=criteria.radius_km,
        terms=list(criteria.terms),
        sort=criteria.sort,
        fallback=page.fallback,
    )


async def run_search(*, db: AsyncSession, signer: CursorSigner, criteria: SearchCriteria, fallback: bool,
                     cursor: str | None) -> SearchOut:
    """GET /api/products/search."""
    request = {"route": "search", "criteria": criteria.as_dict(), "fallback": fallback}
    page, _ = await paging.search_page(db=db, signer=signer, criteria=criteria, fallback=fallback,
                                       token=cursor, request=request, where="query")
    following = paging.next_cursor(signer=signer, page=page, request=request)
    return SearchOut(**search_out(page, next_cursor=following))


async def compare_offers(
    *,
    db: AsyncSession,
    name: str,
    location: str | None,
    in_stock: bool,
    limit: int,
    sort: Literal["price", "distance"] = "price",
) -> CompareOut:
    """Each supplier's cheapest product whose name contains every word of ``name``."""
    refuse_nul(name=name)
    words = normalise_terms(name.split())
    if not words:
        raise invalid_field("query", "name", "name needs at least one word of two or more characters")
    point = location_param(location)
    if sort == "distance" and point is None:
        raise invalid_field("query", "sort", "sort=distance needs a location (lat,lng)")
    conditions = [Supplier.active.is_(True)]
    conditions += [func.lower(Product.name).like(like_pattern(w), escape="\\") for w in words]
    if in_stock:
        conditions.append(Product.stock_quantity > 0)
    cheapest_per_supplier = (
        select(
            Product.id.label("product_id"),
            func.row_number()
            .over(partition_by=Product.supplier_id, order_by=(Product.price, Product.id))
            .label("rank"),
        )
        .join(Supplier, Supplier.id == Product.supplier_id)
        .where(and_(*conditions))
        .subquery()
    )
    query = (
        select(Product, Supplier)
        .join(cheapest_per_supplier, cheapest_per_supplier.c.product_id == Product.id)
        .join(Supplier, Supplier.id == Product.supplier_id)
        .where(cheapest_per_supplier.c.rank == 1)
        .limit(limit)
    )
    if sort == "distance":
        nearby = nearby_suppliers(dialect=db.bind.dialect.name, center=point, radius_km=None)
        query = query.join(nearby, nearby.c.supplier_id == Product.supplier_id)
        query = query.order_by(nearby.c.distance, Product.price, Product.id)
    else:
        query = query.order_by(Product.price, Product.id)
    rows = (await db.execute(query)).all()
    hits = hits_for([(product, supplier, 0) for product, supplier in rows], point)
    offers = [
        Offer(
            product=ProductOut.of(h.product),
            supplier=supplier_summary(h.supplier),
            distance_km=None if h.distance_km is None else round(h.distance_km, 3),
            delivery=None if h.delivery is None else Delivery(**h.delivery.as_dict()),
        )
        for h in hits
    ]
    with_distance = [h for h in hits if h.distance_km is not None]
    return CompareOut(
        name=name,
        location=None if point is None else Location(lat=point.lat, lng=point.lng),
        offers=offers,
        cheapest_product_id=min(hits, key=lambda h: (h.product.price, h.product.id)).product.id if hits else None,
        nearest_product_id=min(with_distance, key=lambda h: (h.distance_km, h.product.price)).product.id
        if with_distance
        else None,
        min_price=min((h.product.price for h in hits), default=None),
        max_price=max((h.product.price for h in hits), default=None),
    )

