"""POST /api/products/ai-search: the rule-based parse and the engine's reading, merged, then searched.

Who decides each filter (the answer's ``sources`` says, per filter):
- the request, for what it sets explicitly (``location``, ``radius_km``, ``in_stock``);
- the rules (``marketplace.search.query``) wherever they found something: they are sure of the
  numbers, places, distances, categories and stock words they recognise;
- the engine (``marketplace.search.extraction``) fills what the rules could not, one field at a
  time, and only with values that pass a check of their own (``check``): prices need an
  amount in the query and at least Rp 100; a place must be in the offline gazetteer and named
  in the query; a distance or a stock wish must be mentioned; search terms may only be words
  the rules left as terms (so a model can drop filler like "kuliah", never add words);
- defaults last (50 km around a known location, in stock only).
When the engine is off, not ready, slow, failing, or answers what does not parse, the rules
alone decide, and ``engine.status`` says why. A page reached by cursor repeats page 1's
parse, sources and engine report without asking again.
"""

from __future__ import annotations

import difflib
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from gateway.api import Gateway
from marketplace.places import geo
from marketplace.places.gazetteer import Gazetteer, Place, normalise
from marketplace.search import extraction, paging
from marketplace.search.criteria import SearchCriteria
from marketplace.search.cursor import CursorSigner
from marketplace.search.listing import NEARBY_RADIUS_KM, criteria_from_parsed, search_origin, search_out
from marketplace.search.query import STOP_WORDS, ParsedQuery, parse_query
from marketplace.search.schemas import AISearchOut, AISearchRequest
from marketplace.settings import MarketplaceSettings

MIN_PLAUSIBLE_PRICE = 100  # rupiah: nothing in a marketplace costs less
PLACE_SIMILARITY = 0.8  # a query word this close to a word of the place's name names it (typos)
AMOUNT_WORDS = frozenset(
    """satu dua tiga empat lima enam tujuh delapan sembilan sepuluh sebelas seratus seribu sejuta
    puluh belas ratus ribu rb juta jt miliar milyar one two three four five six seven eight nine ten
    hundred thousand million billion k""".split())
DISTANCE_WORDS = frozenset("km kilometer kilo meter radius jarak dekat terdekat sekitar near nearby within".split())
STOCK_WORDS = frozenset("stok stock ready tersedia habis kosong available preorder pre order po indent".split())
FILTERS = ("terms", "category", "min_price", "max_price", "place", "radius_km", "sort", "in_stock")


def check(filters: extraction.EngineFilters, *, query: str, rules: ParsedQuery, gazetteer: Gazetteer
          ) -> tuple[dict[str, Any], dict[str, str]]:
    """The engine's values worth using, and why the others were rejected (field -> reason)."""
    words = set(normalise(query).split())
    accepted: dict[str, Any] = {}
    rejected: dict[str, str] = {}

    terms, strays = [], []
    for term in filters.terms:
        parts = [part for part in normalise(term).split() if part not in STOP_WORDS]
        if parts and all(part in rules.terms for part in parts):
            terms += parts
        else:
            strays.append(term)
    if terms:
        accepted["terms"] = list(dict.fromkeys(terms))
    if strays:
        rejected["terms"] = f"{len(strays)} of {len(filters.terms)} not among the query's search words"

    if filters.category is not None:
        accepted["category"] = filters.category

    has_amount = any(char.isdigit() for char in query) or bool(words & AMOUNT_WORDS)
    for name in ("min_price", "max_price"):
        value = getattr(filters, name)
        if value is None:
            continue
        if not has_amount:
            rejected[name] = "the query names no amount"
        elif value < MIN_PLAUSIBLE_PRICE:
            rejected[name] = f"below Rp {MIN_PLAUSIBLE_PRICE}"
        else:
            accepted[name] = value

    if filters.place is not None:
        place, _ = gazetteer.find_in_text(filters.place)
        if place is None:
            rejected["place"] = "not a place in the gazetteer"
        elif not _named_in(place, words):
            rejected["place"] = "not named in the query"
        else:
            accepted["place"] = place

    if filters.radius_km is not None:
        if words & DISTANCE_WORDS:
            accepted["radius_km"] = filters.radius_km
        else:
            rejected["radius_km"] = "the query names no distance"
    if filters.sort is not None:
        accepted["sort"] = filters.sort
    if filters.in_stock is not None:
        if words & STOCK_WORDS:
            accepted["in_stock"] = filters.in_stock
        else:
            rejected["in_stock"] = "the query says nothing about stock"
    return accepted, rejected


def _named_in(place: Place, words: set[str]) -> bool:
    for name_word in normalise(place.name).split():
        if len(name_word) >= 3 and any(
            difflib.SequenceMatcher(None, name_word, word).ratio() >= PLACE_SIMILARITY for word in words
        ):
            return True
    return False


def merge(rules: ParsedQuery, accepted: dict[str, Any], rejected: dict[str, str], *, body: AISearchRequest
          ) -> tuple[ParsedQuery, dict[str, str | None], dict[str, str]]:
    """The merged parse, the source of each filter, and the engine values rejected (with the merge's own)."""
    rejected = dict(rejected)
    sources: dict[str, str | None] = {}

    def pick(name: str, rule_value: Any, *, request_value: Any = None) -> Any:
        for source, value in (("request", request_value), ("rules", rule_value), ("model", accepted.get(name))):
            if value is not None and value != []:
                sources[name] = source
                if source != "model" and name in accepted:
                    rejected.setdefault(name, f"the {source} already gave it")
                return value
        sources[name] = None
        return None

    terms = pick("terms", None) if "terms" in accepted else pick("terms", rules.terms)
    category = pick("category", rules.category)
    min_price = pick("min_price", rules.min_price)
    max_price = pick("max_price", rules.max_price)
    if min_price is not None and max_price is not None and min_price > max_price:
        model_bound = "min_price" if sources["min_price"] == "model" else "max_price"
        rejected[model_bound] = "contradicts the other price bound"
        if model_bound == "min_price":
            min_price, sources["min_price"] = None, None
        else:
            max_price, sources["max_price"] = None, None
    place = pick("place", rules.place)
    sort = pick("sort", rules.sort)
    radius_km = pick("radius_km", rules.radius_km, request_value=body.radius_km)
    in_stock = pick("in_stock", rules.in_stock, request_value=body.in_stock)
    if in_stock is None:
        in_stock, sources["in_stock"] = True, "default"
    _, origin = origin_of(place, body=body)
    sources["location"] = sources["place"] if origin == "place" else origin
    if radius_km is None and sources["location"] is not None:
        radius_km, sources["radius_km"] = NEARBY_RADIUS_KM, "default"
    sources["tags"] = "rules" if rules.tags else None
    merged = ParsedQuery(terms=list(terms or []), min_price=min_price, max_price=max_price, place=place,
                         category=category, tags=list(rules.tags), sort=sort, radius_km=radius_km, in_stock=in_stock)
    return merged, sources, rejected


def origin_of(place: Place | None, *, body: AISearchRequest) -> tuple[geo.Point | None, str | None]:
    """Where the search is centred (``listing.search_origin``: a place in the query wins over ``location``)."""
    return search_origin(named_place=place.point if place is not None else None,
                         request_location=body.location.point() if body.location is not None else None)


def criteria_for(parsed: ParsedQuery, *, body: AISearchRequest) -> SearchCriteria:
    location, _ = origin_of(parsed.place, body=body)
    return criteria_from_parsed(parsed, location=location, radius_km=None, in_stock=bool(parsed.in_stock),
                                limit=body.limit, offset=body.offset)


async def understand(*, gateway: Gateway, settings: MarketplaceSettings, gazetteer: Gazetteer,
                     body: AISearchRequest, request_id: str | None = None) -> tuple[ParsedQuery, dict[str, Any]]:
    """The parse to search by, and what the answer shows of it: the parse, its sources, the engine's report."""
    rules = parse_query(body.query, gazetteer=gazetteer)
    reading = await extraction.read_query(gateway=gateway, settings=settings, query=body.query,
                                          request_id=request_id)
    accepted, rejected = ({}, {}) if reading.filters is None else check(
        reading.filters, query=body.query, rules=rules, gazetteer=gazetteer)
    merged, sources, reading.rejected = merge(rules, accepted, rejected, body=body)
    return merged, {"parsed": merged.as_dict(), "sources": sources, "engine": reading.report()}


async def run(*, db: AsyncSession, signer: CursorSigner, gateway: Gateway, settings: MarketplaceSettings,
              gazetteer: Gazetteer, body: AISearchRequest, request_id: str | None = None) -> AISearchOut:
    """One page of an AI search (page 1 reads the query; a cursor continues it)."""
    request = {"route": "ai-search", "query": body.query,
               "location": None if body.location is None else [body.location.lat, body.location.lng],
               "radius_km": body.radius_km, "in_stock": body.in_stock}
    if body.cursor is None:
        merged, understood = await understand(gateway=gateway, settings=settings,
                                              gazetteer=gazetteer, body=body, request_id=request_id)
        criteria = criteria_for(merged, body=body)
    else:  # the cursor holds the search, and what page 1 showed of it
        understood, criteria = None, SearchCriteria(limit=body.limit, offset=body.offset)
    page, repeated = await paging.search_page(db=db, signer=signer, criteria=criteria, fallback=True,
                                              token=body.cursor, request=request, where="body")
    shown = repeated if repeated is not None else understood
    following = paging.next_cursor(signer=signer, page=page, request=request, extra=shown)
    return AISearchOut(query=body.query, **shown, **search_out(page, next_cursor=following))
