"""The catalogue's request and response bodies: categories, suppliers, products."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, Field, StrictBool, StrictInt, ValidationInfo, field_validator, model_validator

from marketplace.catalogue import taxonomy
from marketplace.catalogue.models import (
    ADDRESS_MAX,
    CATEGORY_MAX,
    CONTACT_MAX,
    DESCRIPTION_MAX,
    PRICE_MAX,
    TAG_MAX,
    TAGS_MAX,
)
from marketplace.inputs import MAX_ID, Input, Name
from marketplace.places.schemas import Location, location_from_text

STOCK_MAX = 10**9

Price = Annotated[StrictInt, Field(ge=0, le=PRICE_MAX)]
Stock = Annotated[StrictInt, Field(ge=0, le=STOCK_MAX)]


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


class SupplierCreate(Input):
    name: Name
    business_name: Name
    location: Location
    address: str = Field("", max_length=ADDRESS_MAX)
    contact: str = Field("", max_length=CONTACT_MAX)
    active: StrictBool = True

    _location = field_validator("location", mode="before")(location_from_text)


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

    @field_validator("*", mode="before")
    @classmethod
    def _not_null(cls, value: Any, info: ValidationInfo) -> Any:
        # A field validator, so the 422's loc names the field ("body", "price"), not just "body".
        if value is None:
            raise ValueError(f"{info.field_name} may not be null (leave it out to keep the current value)")
        return value

    @model_validator(mode="after")
    def _not_empty(self) -> "ProductUpdate":
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
