"""The places part's bodies: a location (an object or ``"lat,lng"``), and the gazetteer's suggestions."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from marketplace.inputs import Input
from marketplace.places import geo

PLACE_QUERY_MAX = 100
PLACES_LIMIT_MAX = 50


class Location(Input):
    lat: float = Field(ge=-90, le=90, allow_inf_nan=False)
    lng: float = Field(ge=-180, le=180, allow_inf_nan=False)

    def point(self) -> geo.Point:
        return geo.Point(self.lat, self.lng)


def location_from_text(value: Any) -> Any:
    """Also accept ``"lat,lng"`` where a location object is expected."""
    if isinstance(value, str):
        point = geo.parse_location(value)  # ValueError -> 422 naming the field
        return {"lat": point.lat, "lng": point.lng}
    return value


class PlaceOut(BaseModel):
    name: str
    admin1: str | None = Field(description="province (GeoNames admin1), e.g. 'Jawa Timur'")
    lat: float
    lng: float
    population: int

    @classmethod
    def of(cls, place) -> "PlaceOut":
        return cls(name=place.name, admin1=place.admin, lat=place.point.lat, lng=place.point.lng,
                   population=place.population)


class PlacesOut(BaseModel):
    places: list[PlaceOut] = Field(description="best match first")
