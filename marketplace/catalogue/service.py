"""Suppliers and their products: registration, look-up, listing and updates.

Each write is one transaction, committed here; any error before the commit
rolls it back when the caller's database session closes, so nothing is half-written.
"""

from __future__ import annotations

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from marketplace.catalogue.models import Product, Supplier, tags_text_for
from marketplace.catalogue.schemas import ProductCreate, ProductUpdate, SupplierCreate
from marketplace.database.tables import utcnow
from marketplace.errors import NotFound


async def register_supplier(*, db: AsyncSession, data: SupplierCreate) -> Supplier:
    """Create a supplier."""
    supplier = Supplier(
        name=data.name,
        business_name=data.business_name,
        lat=data.location.lat,
        lng=data.location.lng,
        address=data.address,
        contact=data.contact,
        active=data.active,
        registration_date=utcnow(),
    )
    db.add(supplier)
    await db.commit()
    return supplier


async def get_supplier(*, db: AsyncSession, supplier_id: int, field: str | None = None) -> Supplier:
    """The supplier with this id, or 404."""
    supplier = await db.get(Supplier, supplier_id)
    if supplier is None:
        raise NotFound("supplier", supplier_id, field=field)
    return supplier


async def create_product(*, db: AsyncSession, data: ProductCreate) -> Product:
    """Add a product to an existing supplier's catalogue."""
    await get_supplier(db=db, supplier_id=data.supplier_id, field="supplier_id")
    now = utcnow()
    product = Product(
        supplier_id=data.supplier_id,
        name=data.name,
        description=data.description,
        price=data.price,
        stock_quantity=data.stock_quantity,
        category=data.category,
        tags=data.tags,
        tags_text=tags_text_for(data.tags),
        created_at=now,
        updated_at=now,
    )
    db.add(product)
    await db.commit()
    return product


async def get_product(*, db: AsyncSession, product_id: int) -> Product:
    """The product with this id, or 404."""
    product = await db.get(Product, product_id)
    if product is None:
        raise NotFound("product", product_id)
    return product


async def update_product(*, db: AsyncSession, product_id: int, changes: ProductUpdate) -> Product:
    """Change some fields of a product (price, stock, ...); 404 if it does not exist."""
    values = changes.changes()
    if "tags" in values:
        values["tags_text"] = tags_text_for(values["tags"])
    values["updated_at"] = utcnow()
    # One UPDATE ... RETURNING: no read-then-write window between two statements.
    statement = (
        update(Product)
        .where(Product.id == product_id)
        .values(**values)
        .returning(Product)
        .execution_options(populate_existing=True)
    )
    product = (await db.scalars(statement)).one_or_none()
    if product is None:
        raise NotFound("product", product_id)
    await db.commit()
    return product


async def list_supplier_products(
    *, db: AsyncSession, supplier_id: int, limit: int, offset: int
) -> tuple[int, list[Product]]:
    """One page of a supplier's products (by id) and their total count; 404 for an unknown supplier."""
    await get_supplier(db=db, supplier_id=supplier_id)
    total = await db.scalar(
        select(func.count()).select_from(Product).where(Product.supplier_id == supplier_id)
    )
    products = await db.scalars(
        select(Product)
        .where(Product.supplier_id == supplier_id)
        .order_by(Product.id)
        .limit(limit)
        .offset(offset)
    )
    return int(total or 0), list(products)
