"""Product search: filters, ranked text, nearest-first order, fallback, pages by offset or by cursor.

Semantics
- Filters always hold: price bounds, category (a path: it and everything below it), in
  stock, active suppliers only.
- Text: ``marketplace.textmatch`` (partial words from three characters, whole words for two;
  every term strictly, or any term; score 3 name / 2 tags / 1 description).
- Order: with a location, nearest supplier first (the WGS-84 geodesic, computed in the
  database before the page is cut, so page 1 holds the nearest matches), then score, then
  product id; without one, score then id. ``price_asc``/``price_desc`` put price first.
- Total: exact up to ``TOTAL_CAP`` matches; beyond, ``TOTAL_CAP`` with ``total_exact`` false
  (counting half a million matches would cost more than the page; Elasticsearch and most
  shop searches do the same).
- Pages: ``offset`` (up to ``schemas.SEARCH_OFFSET_MAX``), or keyset: ``after`` the sort key of
  the last row of the previous page (``marketplace.cursor`` carries it), which costs the
  same at any depth and never skips or repeats a row while the catalogue stays as it was.

How it stays fast (bench/marketplace_search.py, 1,000,000 products): the total is counted
with ``LIMIT TOTAL_CAP + 1`` on the text indexes; a search with fewer matches than that
computes distances only for the suppliers that have a match (``_text_first``); a broader one
reads nearest-first pages ring by ring of distance (``_in_rings``), so the exact distance is
computed for the suppliers near the page, not for all of them (``marketplace.nearest``).

Fallback (when a search finds nothing, unless disabled): see ``_attempts``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from sqlalchemy import ARRAY, Integer, Select, and_, any_, func, literal, or_, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.elements import ColumnElement

from marketplace import geo, nearest, taxonomy, textmatch
from marketplace.models import Product, Supplier

MAX_TERMS = 10
MAX_TERM_LENGTH = 64
MIN_TERM_LENGTH = 2
TOTAL_CAP = 1000
# Rings of distance for nearest-first pages (``_in_rings``): page 1 starts with this radius,
# a later page with twice the distance its previous page spanned (at least RING_MIN_KM).
RING_START_KM = 2.0
RING_MIN_KM = 0.25
RING_GROWTH = 4.0

# Names of the relaxations, as reported in ``SearchPage.fallback``.
ANY_TERM = "matched_any_term"
WIDENED_RADIUS = "widened_radius"
DROPPED_TERMS = "dropped_terms"


@dataclass(frozen=True)
class SearchCriteria:
    terms: tuple[str, ...] = ()
    min_price: int | None = None
    max_price: int | None = None
    category: str | None = None  # a canonical path: matches it and every subcategory
    # Also match products filed only under the category's top level: set when the category
    # was inferred from a product noun ("laptop"), which stays a search term anyway.
    category_includes_parent: bool = False
    location: geo.Point | None = None
    radius_km: float | None = None  # None: no distance limit
    in_stock: bool = False
    limit: int = 20
    offset: int = 0
    match_all_terms: bool = True
    sort: str | None = None  # None: nearest (or relevance); "price_asc" / "price_desc": by price first

    def as_dict(self) -> dict[str, Any]:
        """What a cursor stores: everything but the page's limit and offset."""
        values = asdict(self)
        values.pop("limit"), values.pop("offset")
        values["terms"] = list(self.terms)
        values["location"] = None if self.location is None else [self.location.lat, self.location.lng]
        return values

    @classmethod
    def from_dict(cls, values: dict[str, Any], *, limit: int) -> SearchCriteria:
        location = values.get("location")
        return cls(**{**values, "terms": tuple(values["terms"]), "limit": limit, "offset": 0,
                      "location": None if location is None else geo.Point(*location)})


@dataclass(frozen=True)
class After:
    """The sort key of the last row of a page, and how many rows came up to it."""

    distance: float | None
    score: int
    product_id: int
    price: int
    rows_before: int  # rows up to and including that one: the next page's offset
    span_km: float = 0.0  # distance between the page's first and last rows: sizes the next ring

    def as_dict(self) -> dict[str, Any]:
        return {"distance": self.distance, "score": self.score, "product_id": self.product_id, "price": self.price,
                "span_km": self.span_km}


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


def normalise_terms(words: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Lower-cased, de-duplicated, bounded search terms (too-short words dropped)."""
    terms: list[str] = []
    for word in words:
        word = " ".join(str(word).lower().split())[:MAX_TERM_LENGTH]
        if len(word) >= MIN_TERM_LENGTH and word not in terms:
            terms.append(word)
    return tuple(terms[:MAX_TERMS])


async def search_products(
    *, session: AsyncSession, criteria: SearchCriteria, fallback: bool = True,
    after: After | None = None, total: tuple[int, bool] | None = None,
) -> SearchPage:
    """One page of products matching ``criteria``, relaxing it step by step if nothing matches.

    ``after`` continues a search from the last row of an earlier page (then ``criteria`` is
    the one that page searched, ``total`` its total and exactness, and nothing is relaxed).
    """
    if after is not None:
        known_total, exact = total if total is not None else await _count(session, criteria)
        return await _page(session, criteria, known_total, exact, after=after)
    attempts = _attempts(criteria) if fallback else [(criteria, [])]
    page = None
    for attempt, notes in attempts:
        count, exact = await _count(session, attempt)
        page = await _page(session, attempt, count, exact) if count else SearchPage([], 0, attempt, offset=attempt.offset)
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


def filters(criteria: SearchCriteria) -> list[ColumnElement[bool]]:
    """The product conditions of a search besides text and distance (suppliers' activity is checked by the caller)."""
    conditions: list[ColumnElement[bool]] = []
    if criteria.min_price is not None:
        conditions.append(Product.price >= criteria.min_price)
    if criteria.max_price is not None:
        conditions.append(Product.price <= criteria.max_price)
    if criteria.category:
        paths = taxonomy.paths_under(criteria.category)
        parent = taxonomy.NODES[criteria.category].parent
        if criteria.category_includes_parent and parent is not None:
            paths = (parent, *paths)
        conditions.append(Product.category.in_(paths))
    if criteria.in_stock:
        conditions.append(Product.stock_quantity > 0)
    return conditions


def _matching(criteria: SearchCriteria, dialect: str, *, via_index: bool) -> tuple[Select, ColumnElement[int]]:
    """Products matching ``criteria``'s text and filters (columns chosen by the caller), and the score.

    ``via_index``: read the rows from SQLite's FTS5 index when it applies, for searches not
    driven by suppliers (``textmatch.fts_match``).
    """
    condition, score = textmatch.match_and_score(criteria.terms, match_all=criteria.match_all_terms, dialect=dialect)
    where = filters(criteria)
    if condition is not None:
        where.append(condition)
    match = textmatch.fts_match(criteria.terms, match_all=criteria.match_all_terms, dialect=dialect) if via_index else None
    if match is None:
        return select(Product.id).where(*where), score
    return (select(Product.id).select_from(textmatch.FTS).join(Product, Product.id == textmatch.FTS.c.rowid)
            .where(match, *where)), score


async def _count(session: AsyncSession, criteria: SearchCriteria) -> tuple[int, bool]:
    """(matches, exact): the number of matches, or TOTAL_CAP and False when there are more."""
    dialect = session.bind.dialect.name
    query, _ = _matching(criteria, dialect, via_index=True)
    query = query.join(Supplier, Supplier.id == Product.supplier_id).where(Supplier.active.is_(True))
    if criteria.location is not None and criteria.radius_km is not None:
        within = nearest.within(dialect, criteria.location, criteria.radius_km)
        if dialect == "postgresql":
            # The suppliers first, as one array: PostgreSQL then knows how many rows they hold
            # and can AND the text indexes' bitmaps with theirs, instead of reading and testing
            # every product of every supplier in the radius.
            ids = list(await session.scalars(select(Supplier.id).where(Supplier.active.is_(True), within)))
            if not ids:
                return 0, True
            within = Product.supplier_id == any_(literal(ids, type_=ARRAY(Integer)))
        query = query.where(within)
    matches = query.with_only_columns(literal(1)).limit(TOTAL_CAP + 1).subquery()
    count = int(await session.scalar(select(func.count()).select_from(matches)))
    return (count, True) if count <= TOTAL_CAP else (TOTAL_CAP, False)


def _sort_keys(criteria: SearchCriteria, *, distance, score) -> list[tuple[ColumnElement, bool, str]]:
    """(expression, descending, After field) in sort order."""
    keys: list[tuple[ColumnElement, bool, str]] = []
    if criteria.sort in ("price_asc", "price_desc"):
        keys.append((Product.price, criteria.sort == "price_desc", "price"))
    if distance is not None:
        keys.append((distance, False, "distance"))
    if criteria.terms:
        keys.append((score, True, "score"))
    keys.append((Product.id, False, "product_id"))
    return keys


def _after_condition(keys: list[tuple[ColumnElement, bool, str]], after: After) -> ColumnElement[bool]:
    """Rows that sort after ``after``: (k1 > v1) OR (k1 = v1 AND ((k2 > v2) OR ...))."""
    values = after.as_dict()
    condition = None
    for expression, descending, name in reversed(keys):
        value = values[name]
        beyond = expression < value if descending else expression > value
        condition = beyond if condition is None else or_(beyond, and_(expression == value, condition))
    return condition


def _ordered(query: Select, keys) -> Select:
    return query.order_by(*[expression.desc() if descending else expression for expression, descending, _ in keys])


async def _page(session: AsyncSession, criteria: SearchCriteria, total: int, exact: bool, *,
                after: After | None = None) -> SearchPage:
    offset = after.rows_before if after is not None else criteria.offset
    if criteria.location is None:
        rows = await _without_location(session, criteria, after)
    elif criteria.sort is None and not (exact and total < TOTAL_CAP):
        rows = await _in_rings(session, criteria, after)
    else:
        rows = await _text_first(session, criteria, after)
    loaded = await load_products(session=session, product_ids=[row.product_id for row in rows])
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


def _page_columns(distance, score) -> list:
    return [Product.id.label("product_id"), (distance if distance is not None else literal(None)).label("distance"),
            score.label("score"), Product.price.label("price")]


def _page_window(query: Select, criteria: SearchCriteria, after: After | None) -> Select:
    if after is not None:
        return query.limit(criteria.limit)
    return query.limit(criteria.limit).offset(criteria.offset)


async def _without_location(session: AsyncSession, criteria: SearchCriteria, after: After | None):
    dialect = session.bind.dialect.name
    query, score = _matching(criteria, dialect, via_index=True)
    keys = _sort_keys(criteria, distance=None, score=score)
    query = (query.with_only_columns(*_page_columns(None, score)).join(Supplier, Supplier.id == Product.supplier_id)
             .where(Supplier.active.is_(True)))
    if after is not None:
        query = query.where(_after_condition(keys, after))
    return (await session.execute(_page_window(_ordered(query, keys), criteria, after))).all()


async def _text_first(session: AsyncSession, criteria: SearchCriteria, after: After | None):
    """Distances for the suppliers that have a match only: few matches, or every match sorted by price."""
    dialect = session.bind.dialect.name
    matching, _ = _matching(criteria, dialect, via_index=True)
    with_a_match = Supplier.id.in_(matching.with_only_columns(Product.supplier_id))
    nearby = nearest.distances_between(dialect=dialect, center=criteria.location, low_km=0.0,
                                       high_km=criteria.radius_km, only=with_a_match)
    query, score = _matching(criteria, dialect, via_index=False)
    keys = _sort_keys(criteria, distance=nearby.c.distance, score=score)
    query = (query.with_only_columns(*_page_columns(nearby.c.distance, score))
             .join(nearby, nearby.c.supplier_id == Product.supplier_id))
    if criteria.radius_km is not None:
        query = query.where(nearby.c.distance <= criteria.radius_km)
    if after is not None:
        query = query.where(_after_condition(keys, after))
    return (await session.execute(_page_window(_ordered(query, keys), criteria, after))).all()


def _next_high(low: float, high: float, *, found: int, wanted: int, start: float) -> float:
    """The outer edge of the next ring: wide enough, if products are spread evenly, for the rows still wanted.

    Rows grow with the area between ``start`` (the first ring's inner edge) and the edge, so
    the ring that found ``found`` rows is scaled by area; with nothing found yet, or to keep
    a wrong guess cheap, the width grows between 1.5 and RING_GROWTH times.
    """
    width = high - low
    if found == 0:
        return high + width * RING_GROWTH
    covered = high * high - start * start
    edge = (start * start + covered * wanted / found * 1.2) ** 0.5
    return high + min(max(edge - high, width * 1.5), width * RING_GROWTH * 2)


async def _in_rings(session: AsyncSession, criteria: SearchCriteria, after: After | None):
    """Nearest first, ring by ring of distance, until the page (and any offset before it) is full."""
    dialect = session.bind.dialect.name
    wanted = criteria.limit if after is not None else criteria.offset + criteria.limit
    limit_km = criteria.radius_km if criteria.radius_km is not None else nearest.EARTH_MAX_KM
    start = low = after.distance if after is not None else 0.0
    high = min(low + (max(after.span_km * 2, RING_MIN_KM) if after is not None else RING_START_KM), limit_km)
    rows: list = []
    while True:
        nearby = nearest.distances_between(dialect=dialect, center=criteria.location, low_km=low, high_km=high)
        query, score = _matching(criteria, dialect, via_index=False)
        keys = _sort_keys(criteria, distance=nearby.c.distance, score=score)
        query = (query.with_only_columns(*_page_columns(nearby.c.distance, score))
                 .join(nearby, nearby.c.supplier_id == Product.supplier_id)
                 .where(nearby.c.distance <= high))
        if low == start and after is not None:
            query = query.where(_after_condition(keys, after))
        elif low > start:
            query = query.where(nearby.c.distance > low)
        rows += (await session.execute(_ordered(query, keys).limit(wanted - len(rows)))).all()
        if len(rows) >= wanted or high >= limit_km:
            break
        low, high = high, min(_next_high(low, high, found=len(rows), wanted=wanted, start=start), limit_km)
    return rows if after is not None else rows[criteria.offset:]


async def load_products(*, session: AsyncSession, product_ids: list[int]) -> dict[int, tuple[Product, Supplier]]:
    """{product id: (product, supplier)} for the given ids."""
    if not product_ids:
        return {}
    rows = await session.execute(
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
