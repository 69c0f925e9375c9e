"""Geo helpers: point validation, geodesic distances, conservative boxes, delivery estimates."""

import math

import pytest
from geopy.distance import geodesic
from hypothesis import given, settings
from hypothesis import strategies as st

from marketplace.places.geo import (
    DeliveryEstimate,
    Point,
    bounding_box,
    delivery_estimate,
    distance_km,
    parse_location,
)

JAKARTA = Point(-6.2088, 106.8456)
SURABAYA = Point(-7.2575, 112.7521)
MEDAN = Point(3.5952, 98.6722)


# --- Point ---------------------------------------------------------------------------------


@pytest.mark.parametrize("lat,lng", [(0, 0), (90, 180), (-90, -180), (-6.2, 106.8)])
def test_point_accepts_the_full_range_and_stores_floats(lat, lng):
    point = Point(lat, lng)
    assert (point.lat, point.lng) == (float(lat), float(lng))
    assert isinstance(point.lat, float) and isinstance(point.lng, float)


@pytest.mark.parametrize(
    "lat,lng,field",
    [
        (90.0001, 0, "lat"),
        (-91, 0, "lat"),
        (math.nan, 0, "lat"),
        (math.inf, 0, "lat"),
        ("1", 0, "lat"),
        (True, 0, "lat"),
        (0, 180.5, "lng"),
        (0, -181, "lng"),
        (0, math.nan, "lng"),
        (0, None, "lng"),
    ],
)
def test_point_rejects_out_of_range_values_naming_the_field(lat, lng, field):
    with pytest.raises(ValueError, match=rf"^{field} must"):
        Point(lat, lng)


def test_point_is_immutable():
    with pytest.raises(AttributeError):
        JAKARTA.lat = 0.0  # type: ignore[misc]


# --- distance_km ---------------------------------------------------------------------------


def test_distance_matches_textbook_degree_lengths_on_the_equator():
    # WGS84: one degree of longitude on the equator is 111.3195 km, of latitude 110.5743 km.
    assert distance_km(Point(0, 0), Point(0, 1)) == pytest.approx(111.3195, abs=0.001)
    assert distance_km(Point(0, 0), Point(1, 0)) == pytest.approx(110.5743, abs=0.001)


def test_distance_between_indonesian_cities_matches_known_values():
    # Jakarta-Surabaya is about 663 km and Jakarta-Medan about 1,420 km as the crow flies.
    assert distance_km(JAKARTA, SURABAYA) == pytest.approx(663, abs=8)
    assert distance_km(JAKARTA, MEDAN) == pytest.approx(1420, abs=15)


def test_distance_is_zero_to_itself_and_symmetric():
    assert distance_km(JAKARTA, JAKARTA) == 0
    there, back = distance_km(JAKARTA, SURABAYA), distance_km(SURABAYA, JAKARTA)
    assert there == pytest.approx(back, rel=1e-12)


# --- bounding_box --------------------------------------------------------------------------


def _inside(box, lat, lng):
    min_lat, max_lat, min_lng, max_lng = box
    return min_lat <= lat <= max_lat and min_lng <= lng <= max_lng


@settings(max_examples=400, deadline=None)
@given(
    lat=st.floats(-89.5, 89.5),
    lng=st.floats(-180, 180),
    radius=st.floats(0, 3000),
    fraction=st.floats(0, 1),
    bearing=st.floats(0, 360),
)
def test_bounding_box_contains_every_point_within_the_radius(lat, lng, radius, fraction, bearing):
    center = Point(lat, lng)
    box = bounding_box(center, radius)
    destination = geodesic(kilometers=radius * fraction).destination((lat, lng), bearing)
    assert _inside(box, destination.latitude, destination.longitude)


@settings(max_examples=200, deadline=None)
@given(
    lat=st.floats(-11, 6),  # Indonesia
    lng=st.floats(95, 141),
    radius=st.floats(1, 500),
    bearing=st.floats(0, 360),
)
def test_bounding_box_contains_points_exactly_on_the_circle_in_indonesia(lat, lng, radius, bearing):
    center = Point(lat, lng)
    destination = geodesic(kilometers=radius).destination((lat, lng), bearing)
    assert _inside(bounding_box(center, radius), destination.latitude, destination.longitude)


def test_bounding_box_is_tight_enough_to_be_a_useful_prefilter():
    min_lat, max_lat, min_lng, max_lng = bounding_box(JAKARTA, 10)
    # A 10 km circle near the equator spans about 0.18 degrees each way; the box adds < 1 %.
    assert 2 * 10 / 110.5743 <= max_lat - min_lat < 2 * 10 / 110.5743 * 1.01
    assert 2 * 10 / 111.3195 <= max_lng - min_lng < 2 * 10 / 111.3195 * 1.02
    assert min_lat < JAKARTA.lat < max_lat and min_lng < JAKARTA.lng < max_lng


def test_bounding_box_of_zero_radius_is_the_point_give_or_take_float_rounding():
    min_lat, max_lat, min_lng, max_lng = bounding_box(JAKARTA, 0)
    assert (min_lat, max_lat) == pytest.approx((JAKARTA.lat, JAKARTA.lat), abs=1e-8)
    assert (min_lng, max_lng) == pytest.approx((JAKARTA.lng, JAKARTA.lng), abs=1e-8)
    assert min_lat <= JAKARTA.lat <= max_lat and min_lng <= JAKARTA.lng <= max_lng


def test_bounding_box_reaching_a_pole_covers_every_longitude():
    min_lat, max_lat, min_lng, max_lng = bounding_box(Point(89.9, 10), 50)
    assert max_lat == 90 and (min_lng, max_lng) == (-180, 180)
    assert bounding_box(Point(-89.9, 10), 50)[0] == -90


def test_bounding_box_crossing_the_antimeridian_covers_every_longitude():
    _, _, min_lng, max_lng = bounding_box(Point(-17.7, 179.95), 20)  # Fiji
    assert (min_lng, max_lng) == (-180, 180)


@pytest.mark.parametrize("radius", [-1, math.nan, math.inf, "5", None])
def test_bounding_box_rejects_bad_radius_naming_it(radius):
    with pytest.raises(ValueError, match="radius_km"):
        bounding_box(JAKARTA, radius)


# --- delivery_estimate ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "km,expected",
    [
        (0, DeliveryEstimate(0, 0, "same day")),
        (20, DeliveryEstimate(0, 0, "same day")),
        (20.5, DeliveryEstimate(1, 2, "1-2 days")),
        (120, DeliveryEstimate(1, 2, "1-2 days")),  # Jakarta-Bandung
        (663, DeliveryEstimate(1, 2, "1-2 days")),  # Jakarta-Surabaya
        (800, DeliveryEstimate(2, 3, "2-3 days")),
        (1420, DeliveryEstimate(2, 3, "2-3 days")),  # Jakarta-Medan
        (1500, DeliveryEstimate(2, 4, "2-4 days")),
        (3760, DeliveryEstimate(5, 8, "5-8 days")),  # Jakarta-Jayapura
    ],
)
def test_delivery_estimate_follows_the_documented_formula(km, expected):
    assert delivery_estimate(km) == expected


@given(a=st.floats(0, 20_100), b=st.floats(0, 20_100))
def test_delivery_estimate_never_gets_shorter_with_distance(a, b):
    near, far = delivery_estimate(min(a, b)), delivery_estimate(max(a, b))
    assert near.min_days <= far.min_days and near.max_days <= far.max_days


@given(km=st.floats(0, 20_100))
def test_delivery_estimate_window_is_consistent_with_its_label(km):
    estimate = delivery_estimate(km)
    assert 0 <= estimate.min_days <= estimate.max_days
    low, high = estimate.min_days, estimate.max_days
    expected = "same day" if high == 0 else f"{low}-{high} days"
    assert estimate.label == expected
    assert estimate.as_dict() == {"min_days": low, "max_days": high, "label": expected}


@pytest.mark.parametrize("km", [-0.1, math.nan, math.inf, "10", None, True])
def test_delivery_estimate_rejects_bad_distances(km):
    with pytest.raises(ValueError, match="distance_km"):
        delivery_estimate(km)


# --- parse_location ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,expected",
    [
        ("-6.2,106.8", Point(-6.2, 106.8)),
        ("  -6.2 ,  106.8 ", Point(-6.2, 106.8)),
        ("+3.59,98.67", Point(3.59, 98.67)),
        ("0,0", Point(0, 0)),
        ("90,-180", Point(90, -180)),
        (".5,-.25", Point(0.5, -0.25)),
    ],
)
def test_parse_location_reads_lat_comma_lng(text, expected):
    assert parse_location(text) == expected


@pytest.mark.parametrize(
    "text,message",
    [
        ("", "location must be 'lat,lng'"),
        ("jakarta", "location must be 'lat,lng'"),
        ("-6.2", "location must be 'lat,lng'"),
        ("-6.2;106.8", "location must be 'lat,lng'"),
        ("1,2,3", "location must be 'lat,lng'"),
        ("nan,0", "location must be 'lat,lng'"),
        ("1e3,0", "location must be 'lat,lng'"),
        ("-6,2,106,8", "location must be 'lat,lng'"),
        ("91,0", "location latitude must be between -90 and 90"),
        ("0,180.01", "location longitude must be between -180 and 180"),
    ],
)
def test_parse_location_rejects_malformed_text_with_a_clear_message(text, message):
    with pytest.raises(ValueError, match=message):
        parse_location(text)


def test_parse_location_shortens_huge_input_in_its_message():
    with pytest.raises(ValueError) as caught:
        parse_location("x" * 10_000)
    assert len(str(caught.value)) < 200


@given(st.text(max_size=60))
def test_parse_location_only_ever_raises_value_error(text):
    try:
        point = parse_location(text)
    except ValueError:
        return
    assert -90 <= point.lat <= 90 and -180 <= point.lng <= 180
