"""Pure geographic helpers: validated points, distances, search boxes and delivery estimates.

Distances are WGS84 geodesics (``geopy.distance.geodesic``), accurate to millimetres.

Bounding box (the cheap index prefilter before the exact distance):
    dlat = r / 110.574 km                  (110.574 km is the shortest degree of latitude, at the
                                            equator, so no point within r lies outside)
    dlng = r / (111.3195 km * cos(phi))    (111.3195 km = pi/180 * equatorial radius is a lower
                                            bound on a degree of longitude times 1/cos(phi); phi is
                                            the box edge nearest a pole, where degrees are shortest)
Both deltas get 1e-9 degrees (0.1 mm) more to absorb float rounding.
A box that reaches a pole, or whose longitudes would wrap past +-180, widens to all longitudes:
still conservative, and never needed for Indonesia (95 to 141 degrees east).

Delivery estimate from distance d (km) between supplier and buyer:
    d <= 20 km  -> instant/same-day city courier: 0-0 days, "same day"
    d >  20 km  -> regular courier: min_days = 1 + floor(d / 800)
                                    max_days = min_days + 1 + floor(d / 1500)
e.g. Jakarta-Bandung (120 km) "1-2 days", Jakarta-Surabaya (660 km) "1-2 days",
Jakarta-Medan (1,420 km) "2-3 days", Jakarta-Jayapura (3,760 km) "5-8 days". Both bounds only
grow with distance.
"""

import math
import re
from dataclasses import dataclass

from geopy.distance import geodesic

SAME_DAY_RADIUS_KM = 20.0
KM_PER_DAY_OF_TRANSIT = 800.0  # one extra day on the earliest date per 800 km (trucking + ferry)
KM_PER_DAY_OF_SPREAD = 1500.0  # long routes add uncertainty: one day of spread per 1,500 km

_MIN_KM_PER_DEGREE_LAT = 110.574
_ROUNDING_PAD_DEGREES = 1e-9  # ~0.1 mm: absorbs float rounding in stored and computed points
_KM_PER_DEGREE_LNG_AT_EQUATOR = 111.3195
_LOCATION_NUMBER = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)"
_LOCATION = re.compile(rf"\s*({_LOCATION_NUMBER})\s*,\s*({_LOCATION_NUMBER})\s*")


def _check_coordinate(field: str, value: object, limit: float) -> float:
    """Return value as a float within [-limit, limit] or raise ValueError naming the field."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{field} must be a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number) or not -limit <= number <= limit:
        raise ValueError(f"{field} must be between {-limit:g} and {limit:g}, got {value!r}")
    return number


@dataclass(frozen=True)
class Point:
    """A WGS84 position in decimal degrees."""

    lat: float
    lng: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "lat", _check_coordinate("lat", self.lat, 90.0))
        object.__setattr__(self, "lng", _check_coordinate("lng", self.lng, 180.0))

    def as_tuple(self) -> tuple[float, float]:
        """Return (lat, lng), the order geopy expects."""
        return (self.lat, self.lng)


@dataclass(frozen=True)
class DeliveryEstimate:
    """A delivery window in whole days (0 means today)."""

    min_days: int
    max_days: int
    label: str

    def as_dict(self) -> dict:
        """Return a JSON-ready dict."""
        return {"min_days": self.min_days, "max_days": self.max_days, "label": self.label}


def distance_km(a: Point, b: Point) -> float:
    """Return the WGS84 geodesic distance between two points in kilometres."""
    return geodesic(a.as_tuple(), b.as_tuple()).km


def bounding_box(center: Point, radius_km: float) -> tuple[float, float, float, float]:
    """Return (min_lat, max_lat, min_lng, max_lng) containing every point within radius_km."""
    if isinstance(radius_km, bool) or not isinstance(radius_km, (int, float)):
        raise ValueError(f"radius_km must be a number, got {radius_km!r}")
    if not math.isfinite(radius_km) or radius_km < 0:
        raise ValueError(f"radius_km must be a finite number >= 0, got {radius_km!r}")
    delta_lat = radius_km / _MIN_KM_PER_DEGREE_LAT + _ROUNDING_PAD_DEGREES
    min_lat, max_lat = center.lat - delta_lat, center.lat + delta_lat
    if min_lat <= -90.0 or max_lat >= 90.0:
        return (max(min_lat, -90.0), min(max_lat, 90.0), -180.0, 180.0)
    edge_nearest_pole = max(abs(min_lat), abs(max_lat))
    km_per_degree_lng = _KM_PER_DEGREE_LNG_AT_EQUATOR * math.cos(math.radians(edge_nearest_pole))
    delta_lng = radius_km / km_per_degree_lng + _ROUNDING_PAD_DEGREES
    min_lng, max_lng = center.lng - delta_lng, center.lng + delta_lng
    if min_lng < -180.0 or max_lng > 180.0:
        # The box would wrap across the antimeridian, which one (min, max) pair cannot express.
        return (min_lat, max_lat, -180.0, 180.0)
    return (min_lat, max_lat, min_lng, max_lng)


def delivery_estimate(distance_km: float) -> DeliveryEstimate:
    """Estimate the delivery window for a parcel travelling distance_km (formula in module doc)."""
    if isinstance(distance_km, bool) or not isinstance(distance_km, (int, float)):
        raise ValueError(f"distance_km must be a number, got {distance_km!r}")
    if not math.isfinite(distance_km) or distance_km < 0:
        raise ValueError(f"distance_km must be a finite number >= 0, got {distance_km!r}")
    if distance_km <= SAME_DAY_RADIUS_KM:
        return DeliveryEstimate(min_days=0, max_days=0, label="same day")
    min_days = 1 + math.floor(distance_km / KM_PER_DAY_OF_TRANSIT)
    max_days = min_days + 1 + math.floor(distance_km / KM_PER_DAY_OF_SPREAD)
    label = f"{min_days}-{max_days} days"
    return DeliveryEstimate(min_days=min_days, max_days=max_days, label=label)


def parse_location(text: str) -> Point:
    """Parse "lat,lng" (decimal degrees, e.g. "-6.2,106.8") into a Point."""
    if not isinstance(text, str):
        raise ValueError(f"location must be a string 'lat,lng', got {type(text).__name__}")
    match = _LOCATION.fullmatch(text)
    if match is None:
        shown = text if len(text) <= 40 else text[:40] + "..."
        raise ValueError(
            f"location must be 'lat,lng' in decimal degrees (e.g. '-6.2,106.8'), got {shown!r}"
        )
    lat, lng = float(match.group(1)), float(match.group(2))
    if not -90.0 <= lat <= 90.0:
        raise ValueError(f"location latitude must be between -90 and 90, got {match.group(1)}")
    if not -180.0 <= lng <= 180.0:
        raise ValueError(f"location longitude must be between -180 and 180, got {match.group(2)}")
    return Point(lat=lat, lng=lng)
