"""Product search: filters, ranked text matching, nearest-first order, graceful fallback.

Semantics
- Filters always hold: price bounds, category, in-stock, active suppliers only.
- Text: a product matches a term when the term occurs (case-insensitively) in
  its name, tags or description. Strictly, every term must occur. The score is
  3 per term found in the name + 2 per term in the tags + 1 per term in the
  description.
- Order: with a location, nearest supplier first (WGS-84 geodesic distance,
  computed in the database before LIMIT/OFFSET, so page 1 holds the nearest
  matches), then score, then product id. Without a location: score, then id.
  An explicit price sort ("murah" in a query, ``sort=price_asc``) puts price
  first and keeps the rest as tie-breakers.
- Distance in the database: SQLite calls ``geodesic_km`` (Vincenty, a Python
  function registered on each connection by ``marketplace.db``) on the suppliers inside
  a bounding box of the radius (indexed lat/lng columns); PostgreSQL prefilters
  with ``earth_box(ll_to_earth(...)) @> ll_to_earth(lat, lng)`` on a GiST
  index, then the migration's ``geodesic_km`` (the same Vincenty formula in
  PL/pgSQL). Vincenty agrees with geopy's geodesic to far below a millimetre. Each supplier's distance is computed once (a
  materialised CTE), not once per product. Both databases compute the distance
  with the same formula (``marketplace.geodesy``).

Fallback (when a search finds nothing, unless disabled): see ``_attempts``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from sqlalchemy import Select, and_, case, func, literal, or_, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.elements import ColumnElement

from marketplace import geo, taxonomy
from marketplace.models import Product, Supplier

MAX_TERMS = 10
MAX_TERM_LENGTH = 64
MIN_TERM_LENGTH = 2
# earth_box works on a sphere of radius 6378.168 km, which overstates some
# geodesic distances by up to ~0.7 %; a 1 % wider box never misses a match.
EARTH_BOX_MARGIN = 1.01

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


def normalise_terms(words: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Lower-cased, de-duplicated, bounded search terms (too-short words dropped)."""
    terms: list[str] = []
    for word in words:
        word = " ".join(str(word).lower().split())[:MAX_TERM_LENGTH]
        if len(word) >= MIN_TERM_LENGTH and word not in terms:
            terms.append(word)
    return tuple(terms[:MAX_TERMS])


async def search_products(
    *, session: AsyncSession, criteria: SearchCriteria, fallback: bool = True
) -> SearchPage:
    """One page of products matching ``criteria``, relaxing it step by step if nothing matches."""
    attempts = _attempts(criteria) if fallback else [(criteria, [])]
    page = None
    for attempt, notes in attempts:
        page = await _run(session=session, criteria=attempt)
        page.fallback = notes
        if page.total > 0:
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


def like_pattern(term: str) -> str:
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _term_hits(term: str, dialect: str) -> tuple[ColumnElement[bool], ColumnElement[bool], ColumnElement[bool]]:
    pattern = like_pattern(term)
    if dialect == "postgresql":
        # lower(x COLLATE "C") LIKE: the form the migration's trigram indexes are
        # built for. The "C" collation folds ASCII letters only, like SQLite, and
        # is 2.5x cheaper per row than a UTF-8 locale's lower().
        name = func.lower(Product.name.collate("C"))
        description = func.lower(Product.description.collate("C"))
    else:
        # SQLite's LIKE already ignores ASCII case (its lower() folds nothing more).
        name, description = Product.name, Product.description
    return (
        name.like(pattern, escape="\\"),
        Product.tags_text.like(pattern, escape="\\"),  # stored lower-cased
        description.like(pattern, escape="\\"),
    )


def text_match_and_score(
    terms: tuple[str, ...], *, match_all: bool, dialect: str
) -> tuple[ColumnElement[bool] | None, ColumnElement[int]]:
    """The WHERE condition for ``terms`` (None when there are none) and the score expression."""
    if not terms:
        return None, literal(0)
    conditions, score = [], None
    for term in terms:
        in_name, in_tags, in_description = _term_hits(term, dialect)
        conditions.append(or_(in_name, in_tags, in_description))
        term_score = (
            case((in_name, 3), else_=0) + case((in_tags, 2), else_=0) + case((in_description, 1), else_=0)
        )
        score = term_score if score is None else score + term_score
    condition = and_(*conditions) if match_all else or_(*conditions)
    return condition, score


def nearby_suppliers(*, dialect: str, center: geo.Point, radius_km: float | None):
    """A materialised CTE of active suppliers with their distance to ``center`` (km).

    Rows may lie slightly beyond ``radius_km`` (the prefilter is a box); callers
    filter on the exact ``distance`` column.
    """
    lat, lng = literal(center.lat), literal(center.lng)
    distance = func.geodesic_km(lat, lng, Supplier.lat, Supplier.lng)
    query = select(Supplier.id.label("supplier_id"), distance.label("distance")).where(
        Supplier.active.is_(True)
    )
    if radius_km is not None:
        if dialect == "postgresql":
            box = func.earth_box(func.ll_to_earth(lat, lng), literal(radius_km * 1000 * EARTH_BOX_MARGIN))
            query = query.where(box.op("@>")(func.ll_to_earth(Supplier.lat, Supplier.lng)))
        else:
            min_lat, max_lat, min_lng, max_lng = geo.bounding_box(center, radius_km)
            query = query.where(
                Supplier.lat.between(min_lat, max_lat), Supplier.lng.between(min_lng, max_lng)
            )
    return query.cte("nearby").prefix_with("MATERIALIZED")


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


def build_query(criteria: SearchCriteria, *, dialect: str) -> Select:
    """SELECT product_id, distance, score and the total match count for one page of ``criteria``.

    Only ids are selected and sorted: the page's rows are loaded afterwards, so
    the database sorts narrow rows rather than whole products.
    """
    condition, score_expression = text_match_and_score(
        criteria.terms, match_all=criteria.match_all_terms, dialect=dialect
    )
    score = score_expression.label("score")
    where = filters(criteria)
    if condition is not None:
        where.append(condition)
    if criteria.location is None:
        query = select(Product.id.label("product_id"), literal(None).label("distance"), score)
        query = query.join(Supplier, Supplier.id == Product.supplier_id).where(Supplier.active.is_(True))
        order = [score.desc(), Product.id] if criteria.terms else [Product.id]
    else:
        nearby = nearby_suppliers(dialect=dialect, center=criteria.location, radius_km=criteria.radius_km)
        supplier_key = Product.supplier_id
        if dialect == "sqlite" and criteria.radius_km is None:
            # Every supplier is a candidate: scan products once and look each distance
            # up, instead of reading products supplier by supplier (random reads).
            # "+ 0" keeps SQLite's planner off the supplier_id index for this join.
            supplier_key = Product.supplier_id + 0
        query = select(Product.id.label("product_id"), nearby.c.distance, score)
        query = query.join(nearby, nearby.c.supplier_id == supplier_key)
        if criteria.radius_km is not None:
            where.append(nearby.c.distance <= criteria.radius_km)
        order = [nearby.c.distance, score.desc(), Product.id]
    if criteria.sort == "price_asc":
        order.insert(0, Product.price.asc())
    elif criteria.sort == "price_desc":
        order.insert(0, Product.price.desc())
    return (
        query.add_columns(func.count().over().label("total"))
        .where(*where)
        .order_by(*order)
        .limit(criteria.limit)
        .offset(criteria.offset)
    )


async def _run(*, session: AsyncSession, criteria: SearchCriteria) -> SearchPage:
    dialect = session.bind.dialect.name
    rows = (await session.execute(build_query(criteria, dialect=dialect))).all()
    if rows:
        total = rows[0].total
    elif criteria.offset > 0:  # past the end: the window count saw no row, ask for it alone
        counted = build_query(replace(criteria, offset=0, limit=1), dialect=dialect)
        first = (await session.execute(counted)).first()
        total = first.total if first else 0
    else:
        total = 0
    loaded = await load_products(session=session, product_ids=[row.product_id for row in rows])
    ranked = [(*loaded[row.product_id], int(row.score or 0)) for row in rows]
    return SearchPage(hits=hits_for(ranked, criteria.location), total=int(total), criteria=criteria)


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
