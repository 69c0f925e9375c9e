"""Suppliers by distance from a point: the exact geodesic, computed only where it decides something.

``geodesic_km`` (Vincenty: a Python function on SQLite connections, PL/pgSQL on PostgreSQL)
costs 10-20 us a supplier, so a search must not run it over every supplier. Two cheap tests
come first: the index prefilter (a latitude/longitude box on SQLite's ``ix_suppliers_lat_lng``,
``earth_box`` on PostgreSQL's GiST index), then the certain spherical bounds of
``marketplace.places.sphere`` on the stored unit vectors. Nearest-first pages are read in rings of
distance (``distances_between``): each ring computes the exact distance only for suppliers
that may lie in it, and a page usually fills in the first ring or two.
"""

from __future__ import annotations

from sqlalchemy import CTE, and_, case, func, literal, or_, select
from sqlalchemy.sql.elements import ColumnElement

from marketplace.catalogue.models import Supplier
from marketplace.places import geo, sphere

# earth_box works on a sphere of radius 6378.168 km, which overstates some
# geodesic distances by up to ~0.7 %; a 1 % wider box never misses a match.
EARTH_BOX_MARGIN = 1.01
# Beyond the longest geodesic on Earth (about 20,004 km): "no limit".
EARTH_MAX_KM = 20_100.0


def _box(dialect: str, center: geo.Point, radius_km: float) -> ColumnElement[bool]:
    if dialect == "postgresql":
        lat, lng = literal(center.lat), literal(center.lng)
        box = func.earth_box(func.ll_to_earth(lat, lng), literal(radius_km * 1000 * EARTH_BOX_MARGIN))
        return box.op("@>")(func.ll_to_earth(Supplier.lat, Supplier.lng))
    min_lat, max_lat, min_lng, max_lng = geo.bounding_box(center, radius_km)
    return and_(Supplier.lat.between(min_lat, max_lat), Supplier.lng.between(min_lng, max_lng))


def chord2(center: geo.Point) -> ColumnElement[float]:
    """The squared chord from ``center`` to each supplier on the unit sphere (NULL without a vector)."""
    cx, cy, cz = sphere.unit_vector(center.lat, center.lng)
    return ((Supplier.ux - cx) * (Supplier.ux - cx) + (Supplier.uy - cy) * (Supplier.uy - cy)
            + (Supplier.uz - cz) * (Supplier.uz - cz))


def geodesic(center: geo.Point) -> ColumnElement[float]:
    return func.geodesic_km(literal(center.lat), literal(center.lng), Supplier.lat, Supplier.lng)


def within(dialect: str, center: geo.Point, radius_km: float) -> ColumnElement[bool]:
    """Suppliers within ``radius_km`` (exact), deciding most of them without the exact distance."""
    chord = chord2(center)
    exact = case(
        (and_(Supplier.ux.is_not(None), chord <= sphere.certainly_within(radius_km)), True),
        (and_(Supplier.ux.is_not(None), chord > sphere.possibly_within(radius_km)), False),
        else_=geodesic(center) <= radius_km,
    )
    return and_(_box(dialect, center, radius_km), exact)


def distances_between(*, dialect: str, center: geo.Point, low_km: float, high_km: float | None,
                      only: ColumnElement[bool] | None = None) -> CTE:
    """A materialised CTE (supplier_id, distance) of active suppliers that may lie in [low, high] km.

    Rows may lie outside the range (the bounds are conservative): callers filter on the
    exact ``distance`` column. ``high_km`` None means no upper limit. ``only`` restricts the
    suppliers further (those with a matching product).
    """
    chord = chord2(center)
    conditions = [Supplier.active.is_(True)]
    if high_km is not None:
        conditions.append(_box(dialect, center, high_km))
        conditions.append(or_(Supplier.ux.is_(None), chord <= sphere.possibly_within(high_km)))
    if low_km > 0:
        conditions.append(or_(Supplier.ux.is_(None), chord >= sphere.certainly_within(low_km)))
    if only is not None:
        conditions.append(only)
    query = select(Supplier.id.label("supplier_id"), geodesic(center).label("distance")).where(*conditions)
    return query.cte("nearby").prefix_with("MATERIALIZED")


def nearby_suppliers(*, dialect: str, center: geo.Point, radius_km: float | None) -> CTE:
    """Active suppliers within ``radius_km`` of ``center`` (all of them if None), with their distance."""
    return distances_between(dialect=dialect, center=center, low_km=0.0, high_km=radius_km)
