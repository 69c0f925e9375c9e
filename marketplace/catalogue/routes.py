"""The catalogue part's routes: the category tree, suppliers and their products.

Any API key reads (``PrincipalDep``); changes need an admin key (``WriterDep``).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, status

from gateway.api import PrincipalDep, WriterDep
from marketplace.catalogue import service, taxonomy
from marketplace.catalogue.schemas import (
    CategoryTree,
    ProductCreate,
    ProductOut,
    ProductPage,
    ProductUpdate,
    SupplierCreate,
    SupplierOut,
)
from marketplace.database.requests import DatabaseRoute, DbDep
from marketplace.inputs import MAX_ID, PAGE_LIMIT_MAX

router = APIRouter(prefix="/api", tags=["marketplace"], route_class=DatabaseRoute)  # outages: 503

Id = Annotated[int, Path(ge=1, le=MAX_ID)]
Limit = Annotated[int, Query(ge=1, le=PAGE_LIMIT_MAX)]
Offset = Annotated[int, Query(ge=0, le=10**9)]


@router.get("/categories")
async def list_categories(_: PrincipalDep) -> CategoryTree:
    """The category tree: what ``category`` may name when adding a product or filtering a search."""
    return CategoryTree(categories=taxonomy.tree())


@router.post("/suppliers/register", status_code=status.HTTP_201_CREATED)
async def register_supplier(body: SupplierCreate, _: WriterDep, db: DbDep) -> SupplierOut:
    return SupplierOut.of(await service.register_supplier(db=db, data=body))


@router.get("/suppliers/{supplier_id}")
async def get_supplier(supplier_id: Id, _: PrincipalDep, db: DbDep) -> SupplierOut:
    return SupplierOut.of(await service.get_supplier(db=db, supplier_id=supplier_id))


@router.get("/suppliers/{supplier_id}/products")
async def list_supplier_products(
    supplier_id: Id, _: PrincipalDep, db: DbDep, limit: Limit = 50, offset: Offset = 0
) -> ProductPage:
    total, products = await service.list_supplier_products(
        db=db, supplier_id=supplier_id, limit=limit, offset=offset
    )
    return ProductPage(
        supplier_id=supplier_id, total=total, limit=limit, offset=offset,
        products=[ProductOut.of(p) for p in products],
    )


@router.post("/products", status_code=status.HTTP_201_CREATED)
async def create_product(body: ProductCreate, _: WriterDep, db: DbDep) -> ProductOut:
    return ProductOut.of(await service.create_product(db=db, data=body))


@router.get("/products/{product_id}")
async def get_product(product_id: Id, _: PrincipalDep, db: DbDep) -> ProductOut:
    return ProductOut.of(await service.get_product(db=db, product_id=product_id))


@router.put("/products/{product_id}")
async def update_product(product_id: Id, body: ProductUpdate, _: WriterDep, db: DbDep) -> ProductOut:
    return ProductOut.of(await service.update_product(db=db, product_id=product_id, changes=body))
