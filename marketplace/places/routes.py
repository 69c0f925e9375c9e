"""The places part's route: ``GET /api/places``, the offline gazetteer for place pickers; and
``GazetteerDep``, the gazetteer the feature loaded at start-up, for every route that reads places."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request

from gateway.api import PrincipalDep
from marketplace.errors import invalid_field
from marketplace.inputs import refuse_nul
from marketplace.places.gazetteer import Gazetteer
from marketplace.places.schemas import PLACE_QUERY_MAX, PLACES_LIMIT_MAX, PlaceOut, PlacesOut
from marketplace.state import feature_of

# No database here: this route keeps answering while the marketplace's database is down.
router = APIRouter(prefix="/api", tags=["marketplace"])


async def get_gazetteer(request: Request) -> Gazetteer:
    return feature_of(request).gazetteer


GazetteerDep = Annotated[Gazetteer, Depends(get_gazetteer)]


@router.get("/places")
async def find_places(
    _: PrincipalDep,
    gazetteer: GazetteerDep,
    q: Annotated[str, Query(max_length=PLACE_QUERY_MAX, description="the start of a place name")],
    limit: Annotated[int, Query(ge=1, le=PLACES_LIMIT_MAX)] = 10,
) -> PlacesOut:
    """Places of the offline gazetteer whose names match what was typed so far, best match first."""
    refuse_nul(q=q)
    if not q.strip():
        raise invalid_field("query", "q", "q must not be blank")
    return PlacesOut(places=[PlaceOut.of(place) for place in gazetteer.suggest(q, limit=limit)])
