"""The certain distance bounds: the great circle never strays from the geodesic by the margin."""

from __future__ import annotations

import math
import random

import pytest

from marketplace.places import sphere
from marketplace.places.geodesy import vincenty_km


def chord2_between(a: tuple[float, float], b: tuple[float, float]) -> float:
    u, v = sphere.unit_vector(*a), sphere.unit_vector(*b)
    return sum((x - y) ** 2 for x, y in zip(u, v, strict=True))


def pairs():
    rng = random.Random(5)
    for _ in range(50_000):
        yield (rng.uniform(-90, 90), rng.uniform(-180, 180)), (rng.uniform(-90, 90), rng.uniform(-180, 180))
    for _ in range(20_000):  # short distances, where the search mostly works
        a = (rng.uniform(-80, 80), rng.uniform(-180, 180))
        yield a, (a[0] + rng.uniform(-1, 1), a[1] + rng.uniform(-1, 1))
    for lat in range(-89, 90, 7):  # along meridians and parallels, and nearly antipodal
        yield (lat, 0.0), (lat + 0.01, 0.0)
        yield (lat, 0.0), (lat, 0.01)
        yield (lat, 10.0), (-lat, -169.9)


def test_the_bounds_hold_for_random_and_extreme_pairs():
    for a, b in pairs():
        geodesic = vincenty_km(*a, *b)
        chord = chord2_between(a, b)
        for distance in (geodesic * 0.999, geodesic * 1.001, geodesic):
            if chord <= sphere.certainly_within(distance):
                assert geodesic <= distance, (a, b, distance)
            if chord > sphere.possibly_within(distance):
                assert geodesic > distance, (a, b, distance)


def test_most_suppliers_are_decided_without_the_exact_distance():
    # Away from the edge, the bounds decide: only a band of about 2 % of the radius is undecided.
    center = (-6.2, 106.8)
    inside, outside = (-6.2, 106.8 + 0.4), (-6.2, 106.8 + 0.5)  # about 44 and 55 km east
    assert chord2_between(center, inside) <= sphere.certainly_within(50)
    assert chord2_between(center, outside) > sphere.possibly_within(50)


def test_chords_of_half_the_globe_and_more_are_the_diameter():
    assert sphere.chord2(math.pi * 6371.0088) == sphere.MAX_CHORD2
    assert sphere.chord2(30_000) == sphere.MAX_CHORD2
    assert sphere.chord2(0) == 0.0
    degrees = math.degrees(100 / 6371.0088)  # 100 km along a meridian of the mean sphere
    assert sphere.chord2(100) == pytest.approx(chord2_between((0, 0), (degrees, 0)), rel=1e-9)
