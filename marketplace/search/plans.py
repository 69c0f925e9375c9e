"""How one page of a search is read, and how its matches are counted, at any catalogue size.

- ``count``: the matches, exact up to ``TOTAL_CAP`` (``LIMIT TOTAL_CAP + 1`` on the text
  indexes; on PostgreSQL the suppliers within the radius are found first and passed as one
  array, so the planner can AND the text indexes' bitmaps with theirs).
- ``rows``: the page's (product_id, distance, score, price), in the search's order, after an
  offset or after the last row of the previous page (keyset). Without a location: one query
  ordered by score. With one: ``_text_first`` when there are few matches (distances only for
  suppliers that have one) or the order is by price; otherwise ``_in_rings``, ring by ring of
  distance, so the exact distance is computed for the suppliers near the page
  (``marketplace.search.nearest``).
"""

from __future__ import annotations

from sqlalchemy import ARRAY, Integer, Select, and_, any_, func, literal, or_, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.elements import ColumnElement

from marketplace.catalogue.models import Product, Supplier
from marketplace.search import nearest
from marketplace.search.criteria import After, SearchCriteria, matching

TOTAL_CAP = 1000
# Rings of distance for nearest-first pages (``_in_rings``): page 1 starts with this radius,
# a later page with twice the distance its previous page spanned (at least RING_MIN_KM).
RING_START_KM = 2.0
RING_MIN_KM = 0.25
RING_GROWTH = 4.0


async def count(db: AsyncSession, criteria: SearchCriteria) -> tuple[int, bool]:
    """(matches, exact): the number of matches, or TOTAL_CAP and False when there are more."""
    dialect = db.bind.dialect.name
    query, _ = matching(criteria, dialect, via_index=True)
    query = query.join(Supplier, Supplier.id == Product.supplier_id).where(Supplier.active.is_(True))
    if criteria.location is not None and criteria.radius_km is not None:
        within = nearest.within(dialect, criteria.location, criteria.radius_km)
        if dialect == "postgresql":
            # The suppliers first, as one array: PostgreSQL then knows how many rows they hold
            # and can AND the text indexes' bitmaps with theirs, instead of reading and testing
            # every product of every supplier in the radius.
            ids = list(await db.scalars(select(Supplier.id).where(Supplier.active.is_(True), within)))
            if not ids:
                return 0, True
            within = Product.supplier_id == any_(literal(ids, type_=ARRAY(Integer)))
        query = query.where(within)
    matches = query.with_only_columns(literal(1)).limit(TOTAL_CAP + 1).subquery()
    count = int(await db.scalar(select(func.count()).select_from(matches)))
    return (count, True) if count <= TOTAL_CAP else (TOTAL_CAP, False)


async def rows(db: AsyncSession, criteria: SearchCriteria, total: int, exact: bool, after: After | None):
    """The page's rows: (product_id, distance, score, price)."""
    if criteria.location is None:
        return await _without_location(db, criteria, after)
    if criteria.sort is None and not (exact and total < TOTAL_CAP):
        return await _in_rings(db, criteria, after)
    return await _text_first(db, criteria, after)


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


def _page_columns(distance, score) -> list:
    return [Product.id.label("product_id"), (distance if distance is not None else literal(None)).label("distance"),
            score.label("score"), Product.price.label("price")]


def _page_window(query: Select, criteria: SearchCriteria, after: After | None) -> Select:
    if after is not None:
        return query.limit(criteria.limit)
    return query.limit(criteria.limit).offset(criteria.offset)


async def _without_location(db: AsyncSession, criteria: SearchCriteria, after: After | None):
    dialect = db.bind.dialect.name
    query, score = matching(criteria, dialect, via_index=True)
    keys = _sort_keys(criteria, distance=None, score=score)
    query = (query.with_only_columns(*_page_columns(None, score)).join(Supplier, Supplier.id == Product.supplier_id)
             .where(Supplier.active.is_(True)))
    if after is not None:
        query = query.where(_after_condition(keys, after))
    return (await db.execute(_page_window(_ordered(query, keys), criteria, after))).all()


async def _text_first(db: AsyncSession, criteria: SearchCriteria, after: After | None):
    """Distances for the suppliers that have a match only: few matches, or every match sorted by price."""
    dialect = db.bind.dialect.name
    with_match, _ = matching(criteria, dialect, via_index=True)
    with_a_match = Supplier.id.in_(with_match.with_only_columns(Product.supplier_id))
    nearby = nearest.distances_between(dialect=dialect, center=criteria.location, low_km=0.0,
                                       high_km=criteria.radius_km, only=with_a_match)
    query, score = matching(criteria, dialect, via_index=False)
    keys = _sort_keys(criteria, distance=nearby.c.distance, score=score)
    query = (query.with_only_columns(*_page_columns(nearby.c.distance, score))
             .join(nearby, nearby.c.supplier_id == Product.supplier_id))
    if criteria.radius_km is not None:
        query = query.where(nearby.c.distance <= criteria.radius_km)
    if after is not None:
        query = query.where(_after_condition(keys, after))
    return (await db.execute(_page_window(_ordered(query, keys), criteria, after))).all()


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


async def _in_rings(db: AsyncSession, criteria: SearchCriteria, after: After | None):
    """Nearest first, ring by ring of distance, until the page (and any offset before it) is full."""
    dialect = db.bind.dialect.name
    wanted = criteria.limit if after is not None else criteria.offset + criteria.limit
    limit_km = criteria.radius_km if criteria.radius_km is not None else nearest.EARTH_MAX_KM
    start = low = after.distance if after is not None else 0.0
    high = min(low + (max(after.span_km * 2, RING_MIN_KM) if after is not None else RING_START_KM), limit_km)
    rows: list = []
    while True:
        nearby = nearest.distances_between(dialect=dialect, center=criteria.location, low_km=low, high_km=high)
        query, score = matching(criteria, dialect, via_index=False)
        keys = _sort_keys(criteria, distance=nearby.c.distance, score=score)
        query = (query.with_only_columns(*_page_columns(nearby.c.distance, score))
                 .join(nearby, nearby.c.supplier_id == Product.supplier_id)
                 .where(nearby.c.distance <= high))
        if low == start and after is not None:
            query = query.where(_after_condition(keys, after))
        elif low > start:
            query = query.where(nearby.c.distance > low)
        rows += (await db.execute(_ordered(query, keys).limit(wanted - len(rows)))).all()
        if len(rows) >= wanted or high >= limit_km:
            break
        low, high = high, min(_next_high(low, high, found=len(rows), wanted=wanted, start=start), limit_km)
    return rows if after is not None else rows[criteria.offset:]
