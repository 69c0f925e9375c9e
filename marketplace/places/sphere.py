"""Cheap, certain bounds on the geodesic distance, so the search computes Vincenty for few suppliers.

The exact distance (``marketplace.places.geodesy``, Vincenty on WGS-84) costs 10-20 us a pair in
either database; a search that orders 20,000 suppliers by it spends a third of a second on
that alone. But most suppliers are plainly inside or plainly outside the distance of
interest, and the great-circle distance on the mean-radius sphere tells which: it differs
from the geodesic by less than 0.6 % for any two points (the ellipsoid's flattening is 1/298;
``tests/marketplace/test_sphere.py`` checks the bound on random and extreme pairs). So,
with ``MARGIN`` = 1 %:

    sphere <= d / MARGIN  ->  geodesic <= d         (certainly within d)
    sphere >  d * MARGIN  ->  geodesic >  d         (certainly beyond d)

and only suppliers between the two need the exact formula. Each supplier stores the unit
vector of its position (``ux``, ``uy``, ``uz``; geodetic latitude taken as spherical), so
the great circle becomes plain arithmetic in SQL: the squared chord between two unit vectors,
``(ux - cx)^2 + (uy - cy)^2 + (uz - cz)^2``, grows with the angle between them, and is
compared with the squared chord of a distance computed here once per search.
"""

from __future__ import annotations

import math

from marketplace.places.geodesy import MEAN_RADIUS_KM

MARGIN = 1.01
MAX_CHORD2 = 4.0  # antipodal points: the chord is the diameter


def unit_vector(lat: float, lng: float) -> tuple[float, float, float]:
    """The point's direction from the Earth's centre, on the unit sphere."""
    phi, lam = math.radians(lat), math.radians(lng)
    return (math.cos(phi) * math.cos(lam), math.cos(phi) * math.sin(lam), math.sin(phi))


def chord2(distance_km: float) -> float:
    """The squared unit-sphere chord of a great-circle distance (4.0 from half the globe on)."""
    angle = distance_km / MEAN_RADIUS_KM
    if angle >= math.pi:
        return MAX_CHORD2
    return (2 * math.sin(angle / 2)) ** 2


def certainly_within(distance_km: float) -> float:
    """A squared chord at or below which a point is within ``distance_km`` (geodesic) for sure."""
    return chord2(distance_km / MARGIN)


def possibly_within(distance_km: float) -> float:
    """A squared chord above which a point is beyond ``distance_km`` (geodesic) for sure."""
    return chord2(distance_km * MARGIN)
