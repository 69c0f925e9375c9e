"""The category tree: what sellers may send, how it is stored, how searches filter by either level."""

from __future__ import annotations

import pytest

from marketplace.catalogue import taxonomy
from marketplace.places.gazetteer import normalise
from tests.marketplace.support import (
    READ,
    WRITE,
    add_product,
    add_supplier,
    client,
    count_rows,
    database_url,
    fake_engine,
    field_of,
    settings,
)

TOP_LEVEL = ["elektronik", "fashion", "makanan", "rumah-tangga", "otomotif", "kesehatan", "olahraga", "hobi"]


# --- the tree itself ----------------------------------------------------------------------------


def test_the_tree_has_the_eight_top_levels_and_subcategories_under_each():
    assert list(taxonomy.TOP_LEVEL) == TOP_LEVEL
    for top in taxonomy.TREE:
        assert len(top.children) >= 4, top.slug
        for child in top.children:
            assert child.path == f"{top.slug}/{child.slug}"
            assert child.name_id and child.name_en


@pytest.mark.parametrize(
    ("name", "path"),
    [
        ("laptop", "elektronik/laptop"), ("notebook", "elektronik/laptop"), ("Notebook", "elektronik/laptop"),
        ("hp", "elektronik/smartphone"), ("HP", "elektronik/smartphone"), ("handphone", "elektronik/smartphone"),
        ("smartphone", "elektronik/smartphone"), ("elektronik", "elektronik"), ("Electronics", "elektronik"),
        ("rumah-tangga", "rumah-tangga"), ("Rumah Tangga", "rumah-tangga"), ("household", "rumah-tangga"),
        ("sepatu", "fashion/sepatu"), ("Shoes", "fashion/sepatu"), ("sepatu lari", "olahraga/sepatu-olahraga"),
        ("kopi", "makanan/kopi"), ("Coffee", "makanan/kopi"), ("helm", "otomotif/helm"),
        ("Alat Musik", "hobi/alat-musik"), ("musical instruments", "hobi/alat-musik"),
        ("elektronik/laptop", "elektronik/laptop"), ("Elektronik / Notebook", "elektronik/laptop"),
        ("  LAPTOP  ", "elektronik/laptop"),
    ],
)
def test_sellers_may_name_a_category_many_ways(name, path):
    assert taxonomy.resolve(name) == path


@pytest.mark.parametrize(
    ("name", "closest"),
    [
        ("laptob", "elektronik/laptop"),  # a typo is not corrected silently: the error names the fix
        ("sepatuu", "fashion/sepatu"),
        ("fashion/laptop", "elektronik/laptop"),  # a known sub under the wrong parent is not moved
        ("elektronik/kopi", "makanan/kopi"),
    ],
)
def test_unknown_names_list_the_closest_valid_ones(name, closest):
    with pytest.raises(taxonomy.UnknownCategory) as caught:
        taxonomy.resolve(name)
    message = str(caught.value)
    assert repr(name) in message and closest in message


def test_a_name_far_from_any_lists_the_top_levels():
    with pytest.raises(taxonomy.UnknownCategory, match="top-level categories: elektronik, fashion"):
        taxonomy.resolve("qwxz")


def test_every_name_and_alias_resolves_to_its_own_node():
    for path, node in taxonomy.NODES.items():
        for name in (node.slug, node.name_id, node.name_en, *node.nouns, *node.labels):
            assert taxonomy.resolve(name) == path, name
        if node.parent:
            assert taxonomy.resolve(f"{node.parent}/{node.slug}") == path


def test_two_nodes_may_not_share_a_name():
    seen: dict[str, str] = {}
    for path, node in taxonomy.NODES.items():
        for name in {normalise(n) for n in (node.slug, node.name_id, node.name_en, *node.nouns, *node.labels)}:
            assert seen.setdefault(name, path) == path, name


def test_a_filter_covers_a_node_and_everything_below_it():
    assert taxonomy.paths_under("elektronik/laptop") == ("elektronik/laptop",)
    under = taxonomy.paths_under("elektronik")
    assert under[0] == "elektronik" and "elektronik/laptop" in under and "elektronik/smartphone" in under
    assert not any(path.startswith("fashion") for path in under)


# --- through the API ---------------------------------------------------------------------------


async def test_categories_route_returns_the_tree(client):
    response = await client.get("/api/categories", headers=READ)
    assert response.status_code == 200
    tree = response.json()["categories"]
    assert [node["path"] for node in tree] == TOP_LEVEL
    electronics = tree[0]
    assert electronics["name"] == {"id": "Elektronik", "en": "Electronics"}
    laptop = next(child for child in electronics["children"] if child["slug"] == "laptop")
    assert laptop["path"] == "elektronik/laptop" and laptop["children"] == []
    assert "notebook" in laptop["aliases"]
    assert (await client.get("/api/categories")).status_code == 401


@pytest.mark.parametrize(
    ("sent", "stored"),
    [("laptop", "elektronik/laptop"), ("notebook", "elektronik/laptop"), ("hp", "elektronik/smartphone"),
     ("handphone", "elektronik/smartphone"), ("elektronik", "elektronik"), ("Elektronik/Laptop", "elektronik/laptop"),
     ("Rumah Tangga", "rumah-tangga")],
)
async def test_a_product_is_stored_under_the_canonical_path(client, sent, stored):
    supplier = await add_supplier(client, lat=-6.2, lng=106.8)
    product = await add_product(client, supplier_id=supplier["id"], name="Barang", category=sent)
    assert product["category"] == stored
    assert (await client.get(f"/api/products/{product['id']}", headers=READ)).json()["category"] == stored
    updated = await client.put(f"/api/products/{product['id']}", json={"category": "kopi"}, headers=WRITE)
    assert updated.json()["category"] == "makanan/kopi"


@pytest.mark.parametrize(("sent", "closest"), [("laptob", "elektronik/laptop"), ("fashion/laptop", "elektronik/laptop")])
async def test_an_unknown_category_is_422_listing_the_closest_and_writes_nothing(client, sent, closest):
    supplier = await add_supplier(client, lat=-6.2, lng=106.8)
    body = {"supplier_id": supplier["id"], "name": "Barang", "price": 1000, "category": sent}
    response = await client.post("/api/products", json=body, headers=WRITE)
    assert response.status_code == 422
    assert field_of(response) == ["category"]
    assert closest in response.json()["detail"][0]["msg"]
    assert await count_rows(client, "products") == 0


async def search_ids(client, **params) -> list[int]:
    response = await client.get("/api/products/search", params={**params, "fallback": "false"}, headers=READ)
    assert response.status_code == 200, response.text
    return sorted(hit["product"]["id"] for hit in response.json()["results"])


async def test_search_filters_by_either_level(client):
    supplier = await add_supplier(client, lat=-6.2, lng=106.8)
    laptop = await add_product(client, supplier_id=supplier["id"], name="Laptop Kantor", category="notebook")
    phone = await add_product(client, supplier_id=supplier["id"], name="HP Android", category="handphone")
    only_top = await add_product(client, supplier_id=supplier["id"], name="Kabel Aneh", category="elektronik")
    bag = await add_product(client, supplier_id=supplier["id"], name="Tas Laptop", category="tas")
    assert await search_ids(client, category="laptop") == [laptop["id"]]
    assert await search_ids(client, category="elektronik/laptop") == [laptop["id"]]
    assert await search_ids(client, category="elektronik") == sorted([laptop["id"], phone["id"], only_top["id"]])
    assert await search_ids(client, category="fashion") == [bag["id"]]
    assert await search_ids(client, q="laptop", category="laptop") == [laptop["id"]]
    assert await search_ids(client, q="laptop") == sorted([laptop["id"], bag["id"]])


async def test_search_by_an_unknown_category_is_422_naming_it(client):
    response = await client.get("/api/products/search", params={"category": "laptob"}, headers=READ)
    assert response.status_code == 422 and field_of(response) == ["category"]
    assert "elektronik/laptop" in response.json()["detail"][0]["msg"]


async def test_ai_search_maps_the_product_noun_to_its_subcategory(client):
    supplier = await add_supplier(client, lat=-6.2, lng=106.8)
    laptop = await add_product(client, supplier_id=supplier["id"], name="Laptop Gaming", category="laptop")
    # Filed under the top level only: the noun "laptop" still finds it.
    unfiled = await add_product(client, supplier_id=supplier["id"], name="Laptop Bekas", category="elektronik")
    await add_product(client, supplier_id=supplier["id"], name="Tas Laptop", category="tas")
    await add_product(client, supplier_id=supplier["id"], name="Laptop Stand", category="furnitur")
    response = await client.post("/api/products/ai-search", json={"query": "notebook murah"}, headers=READ)
    body = response.json()
    assert body["parsed"]["category"] == "elektronik/laptop"
    response = await client.post("/api/products/ai-search", json={"query": "laptop murah"}, headers=READ)
    body = response.json()
    assert body["parsed"]["category"] == "elektronik/laptop"
    assert sorted(hit["product"]["id"] for hit in body["results"]) == sorted([laptop["id"], unfiled["id"]])
