"""The catalogue's tables: suppliers and their products, and the bounds of their fields.

The bounds are shared with the request bodies (``catalogue.schemas``), the query parser and the
prompt builder. ``PRICE_MAX`` is the one price cap: the highest price a product may have and a
search, the parser or the engine may ask for.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Boolean, CheckConstraint, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from marketplace.database.tables import Base, JsonType, UTCDateTime, utcnow
from marketplace.inputs import NAME_MAX
from marketplace.places import sphere

ADDRESS_MAX = 500
CONTACT_MAX = 200
DESCRIPTION_MAX = 5000
CATEGORY_MAX = 64
TAG_MAX = 40
TAGS_MAX = 20
# Prices are whole rupiah from 0 to PRICE_MAX: what a product may cost, what a search may ask
# for and what the query parser reads as a price. One trillion rupiah is far above any catalogue
# item and far below BIGINT.
PRICE_MAX = 10**12


def _unit_vector_component(index: int):
    """A column default: one component of the unit vector of the row's (lat, lng) (``places.sphere``)."""

    def default(context) -> float:
        row = context.get_current_parameters()
        return sphere.unit_vector(row["lat"], row["lng"])[index]

    return default


class Supplier(Base):
    __tablename__ = "suppliers"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(NAME_MAX))
    business_name: Mapped[str] = mapped_column(String(NAME_MAX))
    lat: Mapped[float] = mapped_column(Float)
    lng: Mapped[float] = mapped_column(Float)
    address: Mapped[str] = mapped_column(String(ADDRESS_MAX), default="")
    contact: Mapped[str] = mapped_column(String(CONTACT_MAX), default="")
    registration_date: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    # The position as a unit vector: the search's cheap certain distance bounds. Filled from
    # lat/lng on insert; code that moves a supplier must set them too (sphere.unit_vector).
    # NULL (a row written around the application) only makes the search compute the exact
    # distance for that supplier.
    ux: Mapped[float | None] = mapped_column(Float, nullable=True, default=_unit_vector_component(0))
    uy: Mapped[float | None] = mapped_column(Float, nullable=True, default=_unit_vector_component(1))
    uz: Mapped[float | None] = mapped_column(Float, nullable=True, default=_unit_vector_component(2))

    products: Mapped[list[Product]] = relationship(back_populates="supplier")

    # The bounding-box prefilter of the SQLite search ranges over these columns.
    __table_args__ = (Index("ix_suppliers_lat_lng", "lat", "lng"),)


class Product(Base):
    __tablename__ = "products"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    supplier_id: Mapped[int] = mapped_column(
        ForeignKey("suppliers.id", ondelete="CASCADE"), index=True
    )
    name: Mapped[str] = mapped_column(String(NAME_MAX))
    description: Mapped[str] = mapped_column(Text, default="")
    price: Mapped[int] = mapped_column(BigInteger)  # IDR
    stock_quantity: Mapped[int] = mapped_column(Integer, default=0)
    category: Mapped[str] = mapped_column(String(CATEGORY_MAX), index=True)
    tags: Mapped[list[str]] = mapped_column(JsonType, default=list)
    # "|tag1|tag2|", lower case: lets both databases match whole tags with LIKE.
    tags_text: Mapped[str] = mapped_column(Text, default="|")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)

    supplier: Mapped[Supplier] = relationship(back_populates="products")

    # No index on price on purpose: price bounds are broad, and SQLite would pick
    # such an index over a sequential scan and pay a random read per row.
    __table_args__ = (
        CheckConstraint("price >= 0", name="ck_products_price_nonnegative"),
        CheckConstraint("stock_quantity >= 0", name="ck_products_stock_nonnegative"),
    )


def tags_text_for(tags: list[str]) -> str:
    """The ``tags_text`` column value for a list of tags."""
    return "|" + "".join(f"{tag.lower()}|" for tag in tags)
