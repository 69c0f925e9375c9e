"""What a search asks for (``SearchCriteria``), where a page starts (``After``), and the rows that match.

One home for the meaning of the filters and the text conditions, shared by the count and by
every way of reading a page (``marketplace.search.plans``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import Select, select
from sqlalchemy.sql.elements import ColumnElement

from marketplace.catalogue import taxonomy
from marketplace.catalogue.models import Product
from marketplace.places import geo
from marketplace.search import textmatch

MAX_TERMS = 10
MAX_TERM_LENGTH = 64
MIN_TERM_LENGTH = 2


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

    def as_dict(self) -> dict[str, Any]:
        """What a cursor stores: everything but the page's limit and offset."""
        values = asdict(self)
        values.pop("limit"), values.pop("offset")
        values["terms"] = list(self.terms)
        values["location"] = None if self.location is None else [self.location.lat, self.location.lng]
        return values

    @classmethod
    def from_dict(cls, values: dict[str, Any], *, limit: int) -> SearchCriteria:
        location = values.get("location")
        return cls(**{**values, "terms": tuple(values["terms"]), "limit": limit, "offset": 0,
                      "location": None if location is None else geo.Point(*location)})


@dataclass(frozen=True)
class After:
    """The sort key of the last row of a page, and how many rows came up to it."""

    distance: float | None
    score: int
    product_id: int
    price: int
    rows_before: int  # rows up to and including that one: the next page's offset
    span_km: float = 0.0  # distance between the page's first and last rows: sizes the next ring

    def as_dict(self) -> dict[str, Any]:
        return {"distance": self.distance, "score": self.score, "product_id": self.product_id, "price": self.price,
                "span_km": self.span_km}


def normalise_terms(words: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Lower-cased, de-duplicated, bounded search terms (too-short words dropped)."""
    terms: list[str] = []
    for word in words:
        word = " ".join(str(word).lower().split())[:MAX_TERM_LENGTH]
        if len(word) >= MIN_TERM_LENGTH and word not in terms:
            terms.append(word)
    return tuple(terms[:MAX_TERMS])


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


def matching(criteria: SearchCriteria, dialect: str, *, via_index: bool) -> tuple[Select, ColumnElement[int]]:
    """Products matching ``criteria``'s text and filters (columns chosen by the caller), and the score.

    ``via_index``: read the rows from SQLite's FTS5 index when it applies, for searches not
    driven by suppliers (``textmatch.fts_match``).
    """
    condition, score = textmatch.match_and_score(criteria.terms, match_all=criteria.match_all_terms, dialect=dialect)
    where = filters(criteria)
    if condition is not None:
        where.append(condition)
    match = (textmatch.fts_match(criteria.terms, match_all=criteria.match_all_terms, dialect=dialect)
             if via_index else None)
    if match is None:
        return select(Product.id).where(*where), score
    return (select(Product.id).select_from(textmatch.FTS).join(Product, Product.id == textmatch.FTS.c.rowid)
            .where(match, *where)), score
