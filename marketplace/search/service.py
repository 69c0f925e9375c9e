"""Product search: filters, ranked text, nearest-first order, fallback, pages by offset or by cursor.

Semantics
- Filters always hold: price bounds, category (a path: it and everything below it), in
  stock, active suppliers only (``marketplace.search.criteria``).
- Text: ``marketplace.search.textmatch`` (partial words from three characters, whole words for two;
  every term strictly, or any term; score 3 name / 2 tags / 1 description).
- Order: with a location, nearest supplier first (the WGS-84 geodesic, computed in the
  database before the page is cut, so page 1 holds the nearest matches), then score, then
  product id; without one, score then id. ``price_asc``/``price_desc`` put price first.
- Total: exact up to ``plans.TOTAL_CAP`` matches; beyond, the cap with ``total_exact`` false
  (counting half a million matches would cost more than the page; Elasticsearch and most
  shop searches do the same).
- Pages: ``offset`` (up to ``schemas.SEARCH_OFFSET_MAX``), or keyset: ``after`` the sort key of
  the last row of the previous page (``marketplace.search.cursor`` carries it), which costs the
  same at any depth and never skips or repeats a row while the catalogue stays as it was.

How the page and the count are read at a million products: ``marketplace.search.plans``.

Fallback (when a search finds nothing, unless disabled): see ``_attempts``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from marketplace.catalogue.models import Product, Supplier
from marketplace.places import geo
from marketplace.search import plans
from marketplace.search.criteria import After, SearchCriteria

# Names of the relaxations, as reported in ``SearchPage.fallback``.
ANY_TERM = "matched_any_term"
WIDENED_RADIUS = "widened_radius"
DROPPED_TERMS = "dropped_terms"


@dataclass
class Hit:
    product: Product
    supplier: Supplier
    distance_km: float | None
    delivery: geo.DeliveryEstimate | None
    score: int


@dataclass
class SearchPage:
    hits: list[Hit]
    total: int
    criteria: SearchCriteria  # what was finally searched, after any fallback
    fallback: list[str] = field(default_factory=list)
    total_exact: bool = True
    offset: int = 0  # rows before this page
    next_after: After | None = None  # where the next page starts; None: this is the last one


async def search_products(
    *, db: AsyncSession, criteria: SearchCriteria, fallback: bool = True,
    after: After | None = None, total: tuple[int, bool] | None = None,
) -> SearchPage:
    """One page of products matching ``criteria``, relaxing it step by step if nothing matches.

    ``after`` continues a search from the last row of an earlier page (then ``criteria`` is
    the one that page searched, ``total`` its total and exactness, and nothing is relaxed).
    """
    if after is not None:
        known_total, exact = total if total is not None else await plans.count(db, criteria)
        return await _page(db, criteria, known_total, exact, after=after)
    attempts = _attempts(criteria) if fallback else [(criteria, [])]
    page = None
    for attempt, notes in attempts:
        count, exact = await plans.count(db, attempt)
        if count:
            page = await _page(db, attempt, count, exact)
        else:
            page = SearchPage([], 0, attempt, offset=attempt.offset)
        page.fallback = notes
        if count:
            return page
    assert page is not None
    return page


def _attempts(criteria: SearchCriteria) -> list[tuple[SearchCriteria, list[str]]]:
    """The searches to try in order, each with the relaxations it applies.

    1. every term, within the radius;
    2. any one term, within the radius (when there are several terms);
    3. every term, then any term, with no distance limit, still nearest first
       (a relevant product farther away beats an irrelevant one nearby);
    4. no terms (filters kept), within the radius, then with no limit.
    Steps that would repeat an earlier search are skipped.
    """
    text_steps: list[tuple[SearchCriteria, list[str]]] = [(criteria, [])]
    if len(criteria.terms) > 1:
        text_steps.append((replace(criteria, match_all_terms=False), [ANY_TERM]))
    attempts = list(text_steps)
    widen = criteria.location is not None and criteria.radius_km is not None
    if widen:
        attempts += [(replace(step, radius_km=None), [*notes, WIDENED_RADIUS]) for step, notes in text_steps]
    if criteria.terms:
        no_terms = replace(criteria, terms=())
        attempts.append((no_terms, [DROPPED_TERMS]))
        if widen:
            attempts.append((replace(no_terms, radius_km=None), [DROPPED_TERMS, WIDENED_RADIUS]))
    return attempts


async def _page(db: AsyncSession, criteria: SearchCriteria, total: int, exact: bool, *,
                after: After | None = None) -> SearchPage:
    offset = after.rows_before if after is not None else criteria.offset
    rows = await plans.rows(db, criteria, total, exact, after)
    loaded = await load_products(db=db, product_ids=[row.product_id for row in rows])
    ranked = [(*loaded[row.product_id], int(row.score or 0)) for row in rows]
    page = SearchPage(hits=hits_for(ranked, criteria.location), total=total, criteria=criteria,
                      total_exact=exact, offset=offset)
    last_row = offset + len(rows)
    if rows and len(rows) == criteria.limit and (not exact or last_row < total):
        last = rows[-1]
        span = last.distance - rows[0].distance if last.distance is not None else 0.0
        page.next_after = After(distance=last.distance, score=int(last.score or 0), product_id=last.product_id,
                                price=int(last.price), rows_before=last_row, span_km=span)
    return page


async def load_products(*, db: AsyncSession, product_ids: list[int]) -> dict[int, tuple[Product, Supplier]]:
    """{product id: (product, supplier)} for the given ids."""
    if not product_ids:
        return {}
    rows = await db.execute(
        select(Product, Supplier)
        .join(Supplier, Supplier.id == Product.supplier_id)
        .where(Product.id.in_(product_ids))
    )
    return {product.id: (product, supplier) for product, supplier in rows.all()}


def hits_for(ranked, location: geo.Point | None) -> list[Hit]:
    """Hits for (product, supplier, score) triples, with geopy distances and delivery estimates."""
    distances: dict[int, float] = {}
    hits = []
    for product, supplier, score in ranked:
        distance = None
        if location is not None:
            if supplier.id not in distances:
                distances[supplier.id] = geo.distance_km(location, geo.Point(supplier.lat, supplier.lng))
            distance = distances[supplier.id]
        delivery = None if distance is None else geo.delivery_estimate(distance)
        hits.append(Hit(product, supplier, distance, delivery, score))
    return hits
