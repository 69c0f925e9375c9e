"""Request and response bodies of the marketplace API (pydantic).

Every bound here is enforced before any database work, so bad input is a 422
naming the field and nothing is written. Unknown fields are refused rather than
ignored: a misspelt ``stock_quantiy`` must not silently do nothing.
"""

from __future__ import annotations

import json
import re
import unicodedata
import uuid
from datetime import datetime
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    field_validator,
    model_validator,
)

from gateway.api import SESSION_ID_MAX, SESSION_ID_RULE, is_valid_session_id
from marketplace import geo, taxonomy
from marketplace.cursor import MAX_CHARS as CURSOR_MAX_CHARS
from marketplace.models import (
    ADDRESS_MAX,
    CATEGORY_MAX,
    CONTACT_MAX,
    DESCRIPTION_MAX,
    EMAIL_MAX,
    NAME_MAX,
    PRICE_MAX,
    TAG_MAX,
    TAGS_MAX,
)

STOCK_MAX = 10**9
PREFERENCES_MAX_BYTES = 4096
CHAT_MESSAGE_MAX = 4000
QUERY_MAX = 500
PAGE_LIMIT_MAX = 100
# Deepest page reachable by offset: deeper pages are read with a cursor, which costs the same
# at any depth (an offset makes the database produce and drop every row before it).
SEARCH_OFFSET_MAX = 10_000
MAX_ID = 2**31 - 1  # ids are 32-bit integers in both databases

_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")

Name = Annotated[str, Field(min_length=1, max_length=NAME_MAX)]
Price = Annotated[StrictInt, Field(ge=0, le=PRICE_MAX)]
Stock = Annotated[StrictInt, Field(ge=0, le=STOCK_MAX)]


def has_nul(value: Any) -> bool:
    """True if a NUL character hides anywhere in ``value`` (PostgreSQL text and JSONB refuse it)."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(has_nul(k) or has_nul(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(has_nul(v) for v in value)
    return False


class Input(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    @field_validator("*")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        if has_nul(value):
            raise ValueError("must not contain NUL characters")
        return value


class Location(Input):
    lat: float = Field(ge=-90, le=90, allow_inf_nan=False)
    lng: float = Field(ge=-180, le=180, allow_inf_nan=False)

    def point(self) -> geo.Point:
        return geo.Point(self.lat, self.lng)


def _location_from_text(value: Any) -> Any:
    """Also accept ``"lat,lng"`` where a location object is expected."""
    if isinstance(value, str):
        point = geo.parse_location(value)  # ValueError -> 422 naming the field
        return {"lat": point.lat, "lng": point.lng}
    return value


def _normalise_tags(tags: list[str]) -> list[str]:
    seen: list[str] = []
    for tag in tags:
        tag = " ".join(tag.lower().split())
        if not tag:
            raise ValueError("tags must not be empty strings")
        if "|" in tag:
            raise ValueError("tags must not contain '|'")
        if tag not in seen:
            seen.append(tag)
    return seen


def _check_category(value: str) -> str:
    """The canonical path of a category path, slug, name or alias (UnknownCategory is a ValueError: 422)."""
    return taxonomy.resolve(value)


# --- categories -----------------------------------------------------------------


class CategoryName(BaseModel):
    id: str = Field(description="Indonesian name")
    en: str = Field(description="English name")


class CategoryOut(BaseModel):
    path: str = Field(description="canonical path, as stored on products: elektronik or elektronik/laptop")
    slug: str
    name: CategoryName
    aliases: list[str] = Field(description="other names a seller may send for it")
    children: list[CategoryOut]


class CategoryTree(BaseModel):
    categories: list[CategoryOut]


# --- suppliers -----------------------------------------------------------------


class SupplierCreate(Input):
    name: Name
    business_name: Name
    location: Location
    address: str = Field("", max_length=ADDRESS_MAX)
    contact: str = Field("", max_length=CONTACT_MAX)
    active: StrictBool = True

    _location = field_validator("location", mode="before")(_location_from_text)


class SupplierOut(BaseModel):
    id: int
    name: str
    business_name: str
    location: Location
    address: str
    contact: str
    registration_date: datetime
    active: bool

    @classmethod
    def of(cls, supplier) -> "SupplierOut":
        return cls(
            id=supplier.id,
            name=supplier.name,
            business_name=supplier.business_name,
            location=Location(lat=supplier.lat, lng=supplier.lng),
            address=supplier.address,
            contact=supplier.contact,
            registration_date=supplier.registration_date,
            active=supplier.active,
        )


# --- products --------------------------------------------------------------------


class ProductCreate(Input):
    supplier_id: StrictInt = Field(ge=1, le=MAX_ID)
    name: Name
    description: str = Field("", max_length=DESCRIPTION_MAX)
    price: Price
    stock_quantity: Stock = 0
    category: str = Field(min_length=1, max_length=CATEGORY_MAX)
    tags: list[Annotated[str, Field(max_length=TAG_MAX)]] = Field(default_factory=list, max_length=TAGS_MAX)

    _tags = field_validator("tags")(_normalise_tags)
    _category = field_validator("category")(_check_category)


class ProductUpdate(Input):
    """Any subset of a product's fields; the supplier of a product never changes."""

    name: Name | None = None
    description: str | None = Field(None, max_length=DESCRIPTION_MAX)
    price: Price | None = None
    stock_quantity: Stock | None = None
    category: str | None = Field(None, min_length=1, max_length=CATEGORY_MAX)
    tags: list[Annotated[str, Field(max_length=TAG_MAX)]] | None = Field(None, max_length=TAGS_MAX)

    @field_validator("tags")
    @classmethod
    def _tags(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else _normalise_tags(value)

    @field_validator("category")
    @classmethod
    def _category(cls, value: str | None) -> str | None:
        return None if value is None else _check_category(value)

    @model_validator(mode="after")
    def _no_nulls(self) -> "ProductUpdate":
        for name in self.model_fields_set:
            if getattr(self, name) is None:
                raise ValueError(f"{name} may not be null (leave it out to keep the current value)")
        if not self.model_fields_set:
            raise ValueError("give at least one field to change")
        return self

    def changes(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.model_fields_set}


class ProductOut(BaseModel):
    id: int
    supplier_id: int
    name: str
    description: str
    price: int
    stock_quantity: int
    in_stock: bool
    category: str
    tags: list[str]
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, product) -> "ProductOut":
        return cls(
            id=product.id,
            supplier_id=product.supplier_id,
            name=product.name,
            description=product.description,
            price=product.price,
            stock_quantity=product.stock_quantity,
            in_stock=product.stock_quantity > 0,
            category=product.category,
            tags=list(product.tags or []),
            created_at=product.created_at,
            updated_at=product.updated_at,
        )


class ProductPage(BaseModel):
    supplier_id: int
    total: int
    limit: int
    offset: int
    products: list[ProductOut]


# --- users --------------------------------------------------------------------------


def _bounded_preferences(value: dict[str, Any] | None) -> dict[str, Any] | None:
    if value is not None and len(json.dumps(value, ensure_ascii=False).encode()) > PREFERENCES_MAX_BYTES:
        raise ValueError(f"preferences must be at most {PREFERENCES_MAX_BYTES} bytes of JSON")
    return value


class UserCreate(Input):
    name: Name
    email: str = Field(max_length=EMAIL_MAX)
    location: Location | None = None
    ai_access_enabled: StrictBool = False
    preferences: dict[str, Any] = Field(default_factory=dict)

    _location = field_validator("location", mode="before")(_location_from_text)

    @field_validator("email")
    @classmethod
    def _email(cls, value: str) -> str:
        if not _EMAIL.match(value):
            raise ValueError("email must look like name@example.com")
        return value.lower()

    _preferences = field_validator("preferences")(_bounded_preferences)


class UserUpdate(Input):
    """Any subset of a user's fields but the email (which names the user: register another instead)."""

    name: Name | None = None
    location: Location | None = None
    ai_access_enabled: StrictBool | None = None
    preferences: dict[str, Any] | None = None

    _location = field_validator("location", mode="before")(_location_from_text)

    _preferences = field_validator("preferences")(_bounded_preferences)


# End-user tokens (marketplace.tokens): short-lived, a day at most.
TOKEN_TTL_DEFAULT = 3600
TOKEN_TTL_MAX = 24 * 3600


class TokenCreate(Input):
    ttl_seconds: StrictInt = Field(TOKEN_TTL_DEFAULT, ge=60, le=TOKEN_TTL_MAX)


class TokenOut(BaseModel):
    token_id: str
    token: str = Field(description="shown once: the gateway keeps only its SHA-256")
    user_id: str
    expires_at: datetime


class UserOut(BaseModel):
    id: str
    name: str
    email: str
    location: Location | None
    ai_access_enabled: bool
    preferences: dict[str, Any]
    created_at: datetime

    @classmethod
    def of(cls, user) -> "UserOut":
        location = None if user.lat is None else Location(lat=user.lat, lng=user.lng)
        return cls(
            id=user.public_id,
            name=user.name,
            email=user.email,
            location=location,
            ai_access_enabled=user.ai_access_enabled,
            preferences=dict(user.preferences or {}),
            created_at=user.created_at,
        )


# --- search -----------------------------------------------------------------------------


class Delivery(BaseModel):
    min_days: int
    max_days: int
    label: str


class SupplierSummary(BaseModel):
    id: int
    name: str
    business_name: str
    location: Location
    address: str


class SearchHit(BaseModel):
    product: ProductOut
    supplier: SupplierSummary
    distance_km: float | None = Field(description="WGS-84 geodesic distance (geopy), when a location is known")
    delivery: Delivery | None
    score: int = Field(description="text relevance: 3 per term in the name, 2 in the tags, 1 in the description")


class SearchOut(BaseModel):
    results: list[SearchHit]
    total: int = Field(description="matches, exact up to 1,000 (see total_exact)")
    total_exact: bool = Field(description="false: there are more matches than total says")
    limit: int
    offset: int = Field(description="rows before this page")
    next_cursor: str | None = Field(description="pass as cursor for the next page; null on the last page")
    location: Location | None
    radius_km: float | None = Field(description="the radius finally searched (null: unlimited)")
    terms: list[str]
    sort: str | None = Field(description="null: nearest first with a location, else by relevance")
    fallback: list[str] = Field(description="relaxations applied because the strict search found nothing")


class AISearchRequest(Input):
    query: str = Field(min_length=1, max_length=QUERY_MAX)
    location: Location | None = None
    radius_km: float | None = Field(None, gt=0, le=20_000)
    in_stock: StrictBool | None = Field(None, description="null: as the query says, else in stock only")
    limit: int = Field(20, ge=1, le=PAGE_LIMIT_MAX)
    offset: int = Field(0, ge=0, le=SEARCH_OFFSET_MAX)
    cursor: str | None = Field(None, min_length=1, max_length=CURSOR_MAX_CHARS,
                               description="next_cursor of the previous page (instead of offset)")

    _location = field_validator("location", mode="before")(_location_from_text)


class AISearchOut(SearchOut):
    query: str
    parsed: dict[str, Any] = Field(description="the filters searched by, merged from the rules and the engine")
    sources: dict[str, str | None] = Field(
        description="per filter: request, rules, model, default, or null when absent")
    engine: dict[str, Any] = Field(description="the engine's reading: status, model, detail, elapsed_ms, rejected")


class Offer(BaseModel):
    product: ProductOut
    supplier: SupplierSummary
    distance_km: float | None
    delivery: Delivery | None


class CompareOut(BaseModel):
    name: str
    location: Location | None
    offers: list[Offer]
    cheapest_product_id: int | None
    nearest_product_id: int | None
    min_price: int | None
    max_price: int | None


# --- chat and conversations --------------------------------------------------------------


class ChatRequest(Input):
    # Required with an API key; with an end-user token it defaults to the token's user.
    user_id: uuid.UUID | None = None
    message: str = Field(min_length=1, max_length=CHAT_MESSAGE_MAX)
    session_id: str | None = Field(None, min_length=1, max_length=SESSION_ID_MAX)
    location: Location | None = None
    stream: StrictBool = False

    _location = field_validator("location", mode="before")(_location_from_text)

    @field_validator("message")
    @classmethod
    def _bounded_after_normalisation(cls, value: str) -> str:
        # The prompt builder NFKC-normalises the message, which can expand a character up to
        # 18-fold (U+FDFA); the limit must hold for the text that reaches the parser and engine.
        normalised = len(unicodedata.normalize("NFKC", value))
        if normalised > CHAT_MESSAGE_MAX:
            raise ValueError(f"message must be at most {CHAT_MESSAGE_MAX} characters after Unicode "
                             f"NFKC normalisation (this one has {normalised})")
        return value

    @field_validator("session_id")
    @classmethod
    def _session_id(cls, value: str | None) -> str | None:
        if value is not None and not is_valid_session_id(value):
            raise ValueError(f"session_id {SESSION_ID_RULE}")
        return value


class ChatOut(BaseModel):
    answer: str
    products: list[SearchHit]
    conversation_id: str
    session_id: str
    parsed: dict[str, Any]
    fallback: list[str]
    finish_reason: str | None
    usage: dict[str, Any] | None


class MessageOut(BaseModel):
    id: int
    role: str
    content: str
    timestamp: datetime
    details: dict[str, Any] | None


class ConversationOut(BaseModel):
    id: str
    user_id: str
    session_id: str
    created_at: datetime
    messages: list[MessageOut]


# --- places (the gazetteer, for place pickers) ----------------------------------------------

PLACE_QUERY_MAX = 100
PLACES_LIMIT_MAX = 50


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
