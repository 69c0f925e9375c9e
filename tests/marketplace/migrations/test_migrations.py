"""Migrations carry rows written by the old schema forward without loss (and back again).

The rows are written with the first revision's columns only (plain table constructs, not the
current models), then the database is upgraded to the newest revision, read back and
compared; the PostgreSQL run (the `*_postgres.py` modules beside this one) repeats all of it on a real
server.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from marketplace.database.engines import create_engine
from marketplace.database.tables import JsonType, UTCDateTime
from marketplace.migrations.runner import VERSION_TABLE, downgrade_to, head_revision, upgrade_to
from marketplace.places import sphere
from tests.marketplace.support import (
    APP,
    READ,
    WRITE,
    database_url,
    fake_engine,
    make_settings,
    running_app,
)

WHEN = datetime(2026, 12, 1, 8, 30, tzinfo=UTC)

SUPPLIERS = sa.table(
    "suppliers", sa.column("id"), sa.column("name"), sa.column("business_name"), sa.column("lat"), sa.column("lng"),
    sa.column("address"), sa.column("contact"), sa.column("registration_date", UTCDateTime()), sa.column("active"),
)
PRODUCTS = sa.table(
    "products", sa.column("id"), sa.column("supplier_id"), sa.column("name"), sa.column("description"),
    sa.column("price"), sa.column("stock_quantity"), sa.column("category"), sa.column("tags", JsonType),
    sa.column("tags_text"), sa.column("created_at", UTCDateTime()), sa.column("updated_at", UTCDateTime()),
)
USERS = sa.table(
    "users", sa.column("id"), sa.column("name"), sa.column("email"), sa.column("lat"), sa.column("lng"),
    sa.column("ai_access_enabled"), sa.column("preferences", JsonType), sa.column("created_at", UTCDateTime()),
)
CONVERSATIONS = sa.table("conversations", sa.column("id"), sa.column("user_id"), sa.column("session_id"),
                         sa.column("created_at", UTCDateTime()))
# Since 0005 the client's name for a conversation is the column ``name`` (it was ``session_id``).
NAMED_CONVERSATIONS = sa.table("conversations", sa.column("id"), sa.column("user_id"),
                               sa.column("name").label("session_id"), sa.column("created_at", UTCDateTime()))
MESSAGES = sa.table("messages", sa.column("id"), sa.column("conversation_id"), sa.column("role"),
                    sa.column("content"), sa.column("timestamp", UTCDateTime()), sa.column("details", JsonType))

# (name, tags, category as the old schema stored it, category expected after the upgrade)
OLD_PRODUCTS = [
    ("Laptop Gaming ASUS ROG Strix G15", ["gaming", "laptop"], "elektronik", "elektronik/laptop"),
    ("Xiaomi Redmi Note 13", ["hp", "android"], "elektronik", "elektronik/smartphone"),  # told by a tag
    ("Rice Cooker Miyako 1.8 Liter", ["dapur"], "elektronik", "elektronik/peralatan-rumah"),
    ("Kopi Arabika Gayo 250g", ["kopi"], "makanan", "makanan/kopi"),
    ("Tas Laptop Kulit", [], "fashion", "fashion/tas"),  # the head noun, not "laptop"
    ("Meja Laptop Lipat", [], "rumah-tangga", "rumah-tangga/furnitur"),
    ("Laptop Stand Kayu", [], "rumah-tangga", "rumah-tangga"),  # laptop is elektronik: never followed
    ("Sepatu Lari Ortuseight", ["lari"], "olahraga", "olahraga/sepatu-olahraga"),
    ("Helm KYT TT-Course", ["helm"], "otomotif", "otomotif/helm"),
    ("Vitamin C 1000mg", [], "kesehatan", "kesehatan/vitamin"),
    ("Barang Antik Keluarga", ["langka"], "hobi", "hobi"),  # names no subcategory
    ("Sesuatu Yang Aneh", [], "lainnya", "lainnya"),  # not a slug at all: left as it was
]


async def upgrade(url: str, revision: str) -> None:
    await asyncio.to_thread(upgrade_to, url, revision)


async def write_old_rows(url: str) -> None:
    engine = create_engine(url)
    try:
        async with engine.begin() as connection:
            await connection.execute(sa.insert(SUPPLIERS), [
                {"id": 1, "name": "Toko Lama", "business_name": "CV Lama", "lat": -6.2, "lng": 106.8,
                 "address": "Jl. Lama 1", "contact": "+62 811", "registration_date": WHEN, "active": True}])
            await connection.execute(sa.insert(PRODUCTS), [
                {"id": index + 1, "supplier_id": 1, "name": name, "description": f"deskripsi {index}",
                 "price": 1000 * (index + 1), "stock_quantity": index, "category": category, "tags": tags,
                 "tags_text": "|" + "".join(f"{t}|" for t in tags), "created_at": WHEN, "updated_at": WHEN}
                for index, (name, tags, category, _) in enumerate(OLD_PRODUCTS)])
            await connection.execute(sa.insert(USERS), [
                {"id": 1, "name": "Sari", "email": "sari@example.com", "lat": -6.2, "lng": 106.8,
                 "ai_access_enabled": True, "preferences": {"bahasa": "id"}, "created_at": WHEN}])
            await connection.execute(sa.insert(CONVERSATIONS), [
                {"id": 1, "user_id": 1, "session_id": "sari-1", "created_at": WHEN}])
            await connection.execute(sa.insert(MESSAGES), [
                {"id": 1, "conversation_id": 1, "role": "user", "content": "cari kopi", "timestamp": WHEN,
                 "details": {"parsed": {"terms": ["kopi"]}}},
                {"id": 2, "conversation_id": 1, "role": "assistant", "content": "Ada Kopi Gayo.", "timestamp": WHEN,
                 "details": {"product_ids": [4]}}])
    finally:
        await engine.dispose()


async def read_rows(url: str) -> dict[str, list[dict]]:
    """Every table's rows in the first revision's columns (a conversation's name read as ``session_id``)."""
    engine = create_engine(url)
    try:
        async with engine.connect() as connection:
            named = "name" in {c["name"] for c in await connection.run_sync(
                lambda sync: sa.inspect(sync).get_columns("conversations"))}
            tables = (SUPPLIERS, PRODUCTS, USERS, NAMED_CONVERSATIONS if named else CONVERSATIONS, MESSAGES)
            return {
                table.name: [dict(row._mapping) for row in await connection.execute(
                    sa.select(*table.c).order_by(table.c.id))]
                for table in tables
            }
    finally:
        await engine.dispose()


async def test_old_rows_survive_the_upgrade_with_categories_as_paths(database_url):
    await upgrade(database_url, "0001")
    await write_old_rows(database_url)
    before = await read_rows(database_url)

    await upgrade(database_url, "head")
    after = await read_rows(database_url)

    assert [p["category"] for p in after["products"]] == [expected for *_, expected in OLD_PRODUCTS]
    for old, new in zip(before["products"], after["products"], strict=True):
        assert {k: v for k, v in new.items() if k != "category"} == {k: v for k, v in old.items() if k != "category"}
    for table in ("suppliers", "users", "conversations", "messages"):
        assert after[table] == before[table]

    await asyncio.to_thread(downgrade_to, database_url, "0001")
    assert await read_rows(database_url) == before


async def test_migrated_rows_are_found_by_either_level(database_url, fake_engine):
    await upgrade(database_url, "0001")
    await write_old_rows(database_url)
    settings = make_settings(database_url=database_url, vllm_base_url=fake_engine.base_url)
    async with running_app(settings) as client:  # the app migrates to the newest revision itself
        async def names(**params) -> list[str]:
            response = await client.get("/api/products/search", params={**params, "fallback": "false"}, headers=READ)
            assert response.status_code == 200, response.text
            return sorted(hit["product"]["name"] for hit in response.json()["results"])

        assert await names(category="laptop") == ["Laptop Gaming ASUS ROG Strix G15"]
        assert await names(category="elektronik") == [
            "Laptop Gaming ASUS ROG Strix G15", "Rice Cooker Miyako 1.8 Liter", "Xiaomi Redmi Note 13"]
        assert await names(category="handphone") == ["Xiaomi Redmi Note 13"]
        assert await names(category="rumah-tangga") == ["Laptop Stand Kayu", "Meja Laptop Lipat"]
        # The text indexes of 0003 hold the old rows: partial words and two-letter words.
        assert await names(q="gayo") == ["Kopi Arabika Gayo 250g"]
        assert await names(q="hp") == ["Xiaomi Redmi Note 13"]  # from its tags
        assert await names(q="lapto", location="-6.2,106.8", radius_km=5) == [
            "Laptop Gaming ASUS ROG Strix G15", "Laptop Stand Kayu", "Meja Laptop Lipat", "Tas Laptop Kulit"]
        async with client.app.state.marketplace.db_factory() as db:
            vector = (await db.execute(sa.text("SELECT ux, uy, uz FROM suppliers WHERE id = 1"))).one()
    assert tuple(vector) == pytest.approx(sphere.unit_vector(-6.2, 106.8), abs=1e-15)
    assert head_revision() != "0001"


async def test_users_and_conversations_of_the_previous_head_get_uuids_and_keep_everything(database_url, fake_engine):
    await upgrade(database_url, "0001")
    await write_old_rows(database_url)
    await upgrade(database_url, "0003")  # the head before users were owned
    before = await read_rows(database_url)

    await upgrade(database_url, "0004")
    assert await read_rows(database_url) == before  # every old column of every row, as it was
    engine = create_engine(database_url)
    try:
        async with engine.connect() as connection:
            users = (await connection.execute(sa.text("SELECT public_id, owner_key_id FROM users"))).all()
            conversation_id = await connection.scalar(sa.text("SELECT public_id FROM conversations"))
    finally:
        await engine.dispose()
    ((user_id, owner),) = users
    assert str(uuid.UUID(user_id)) == user_id and str(uuid.UUID(conversation_id)) == conversation_id
    assert owner is None  # nobody knows which key made it

    await _sequences_past_written_ids(database_url)
    settings = make_settings(database_url=database_url, vllm_base_url=fake_engine.base_url)
    async with running_app(settings) as client:
        # A row from before ownership: admin keys see it, app keys (and read keys) do not.
        user = await client.get(f"/api/users/{user_id}", headers=WRITE)
        assert user.status_code == 200 and user.json()["email"] == "sari@example.com"
        conversation = await client.get(f"/api/conversations/{conversation_id}", headers=WRITE)
        assert [m["content"] for m in conversation.json()["messages"]] == ["cari kopi", "Ada Kopi Gayo."]
        assert conversation.json()["user_id"] == user_id and conversation.json()["session_id"] == "sari-1"
        assert (await client.get(f"/api/users/{user_id}", headers=APP)).status_code == 404
        assert (await client.get(f"/api/conversations/{conversation_id}", headers=APP)).status_code == 404
        # Its conversation goes on with the admin key, and a token minted for it works.
        chat = await client.post("/api/chat", json={"user_id": user_id, "message": "lagi", "session_id": "sari-1"},
                                 headers=WRITE)
        assert chat.status_code == 200 and chat.json()["conversation_id"] == conversation_id
        token = (await client.post(f"/api/users/{user_id}/tokens", json={}, headers=WRITE)).json()["token"]
        mine = await client.get(f"/api/users/{user_id}", headers={"Authorization": f"Bearer {token}"})
        assert mine.status_code == 200

    await asyncio.to_thread(downgrade_to, database_url, "0003")
    after = await read_rows(database_url)
    assert after["users"] == before["users"] and after["conversations"] == before["conversations"]
    assert after["messages"][:2] == before["messages"]  # the downgrade dropped columns, never rows


async def _sequences_past_written_ids(url: str) -> None:
    """PostgreSQL: move the id sequences past the ids written by hand (the app's inserts advance them)."""
    engine = create_engine(url)
    try:
        async with engine.begin() as connection:
            if connection.dialect.name == "postgresql":
                for table in ("suppliers", "products", "users", "conversations", "messages"):
                    await connection.execute(sa.text(
                        f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))"))
    finally:
        await engine.dispose()


OWNED_USERS = sa.table("users", sa.column("id"), sa.column("name"), sa.column("email"), sa.column("ai_access_enabled"),
                       sa.column("preferences", JsonType), sa.column("created_at", UTCDateTime()),
                       sa.column("public_id"), sa.column("owner_key_id"))


def _user(row_id: int, email: str, owner: str | None) -> dict:
    return {"id": row_id, "name": f"U{row_id}", "email": email, "ai_access_enabled": True, "preferences": {},
            "created_at": WHEN, "public_id": str(uuid.uuid4()), "owner_key_id": owner}


async def _write(url: str, table, rows: list[dict]) -> None:
    engine = create_engine(url)
    try:
        async with engine.begin() as connection:
            await connection.execute(sa.insert(table), rows)
    finally:
        await engine.dispose()


async def _version(url: str) -> str:
    engine = create_engine(url)
    try:
        async with engine.connect() as connection:
            return await connection.scalar(sa.text(f"SELECT version_num FROM {VERSION_TABLE}"))
    finally:
        await engine.dispose()


async def test_names_become_the_owners_own_and_the_downgrade_refuses_what_it_cannot_hold(database_url):
    """0005: an email is unique per owning key and a conversation's name per user; back again when possible."""
    await upgrade(database_url, "0001")
    await write_old_rows(database_url)
    await upgrade(database_url, "0004")
    before = await read_rows(database_url)

    await upgrade(database_url, "0005")
    assert await read_rows(database_url) == before  # every row as it was; session_id is read from ``name``
    # What the new rules allow: the same email under two keys, the same name for two users.
    await _write(database_url, OWNED_USERS, [_user(2, "sari@example.com", "app-a"), _user(3, "sari@example.com", "app-b")])
    named = sa.table("conversations", sa.column("id"), sa.column("user_id"), sa.column("name"),
                     sa.column("created_at", UTCDateTime()), sa.column("public_id"))
    await _write(database_url, named, [{"id": 2, "user_id": 2, "name": "sari-1", "created_at": WHEN,
                                        "public_id": str(uuid.uuid4())}])
    # ... and what they still refuse: the same email twice under one key, one name twice for one user.
    with pytest.raises(sa.exc.IntegrityError):
        await _write(database_url, OWNED_USERS, [_user(4, "sari@example.com", "app-a")])
    with pytest.raises(sa.exc.IntegrityError):
        await _write(database_url, named, [{"id": 3, "user_id": 2, "name": "sari-1", "created_at": WHEN,
                                            "public_id": str(uuid.uuid4())}])

    with pytest.raises(RuntimeError, match="1 emails are registered under more than one key"):
        await asyncio.to_thread(downgrade_to, database_url, "0004")
    assert await _version(database_url) == "0005"  # the refused downgrade changed nothing
    engine = create_engine(database_url)
    try:
        async with engine.begin() as connection:
            await connection.execute(sa.text("UPDATE users SET email = 'u' || id || '@example.com' WHERE id > 1"))
    finally:
        await engine.dispose()
    with pytest.raises(RuntimeError, match="1 conversation names are used by more than one user"):
        await asyncio.to_thread(downgrade_to, database_url, "0004")

    engine = create_engine(database_url)
    try:
        async with engine.begin() as connection:
            await connection.execute(sa.text("UPDATE conversations SET name = 'lain-1' WHERE id = 2"))
    finally:
        await engine.dispose()
    await asyncio.to_thread(downgrade_to, database_url, "0004")
    after = await read_rows(database_url)
    assert after["conversations"][0] == before["conversations"][0] and after["messages"] == before["messages"]
    with pytest.raises(sa.exc.IntegrityError):  # the email is unique across keys again
        await _write(database_url, OWNED_USERS, [_user(5, "sari@example.com", "app-c")])


async def test_conversations_get_their_last_use_and_lose_it_again(database_url):
    """0006: ``last_active_at`` is the newest message's time, or the creation for an empty conversation."""
    await upgrade(database_url, "0001")
    await write_old_rows(database_url)  # conversation 1, created WHEN, messages at WHEN
    later = WHEN + timedelta(hours=3)
    await _write(database_url, CONVERSATIONS, [{"id": 2, "user_id": 1, "session_id": "sari-2", "created_at": WHEN}])
    await _write(database_url, MESSAGES, [{"id": 3, "conversation_id": 1, "role": "user", "content": "lagi",
                                           "timestamp": later, "details": None}])
    await _write(database_url, CONVERSATIONS, [{"id": 3, "user_id": 1, "session_id": "kosong",
                                                "created_at": WHEN - timedelta(days=2)}])
    await upgrade(database_url, "0005")
    before = await read_rows(database_url)

    await upgrade(database_url, "0006")
    assert await read_rows(database_url) == before
    last_used = sa.table("conversations", sa.column("id"), sa.column("last_active_at", UTCDateTime()))
    engine = create_engine(database_url)
    try:
        async with engine.connect() as connection:
            rows = dict((await connection.execute(sa.select(last_used.c.id, last_used.c.last_active_at))).all())
    finally:
        await engine.dispose()
    assert rows == {1: later, 2: WHEN, 3: WHEN - timedelta(days=2)}

    await asyncio.to_thread(downgrade_to, database_url, "0005")
    assert await read_rows(database_url) == before
    engine = create_engine(database_url)
    try:
        async with engine.connect() as connection:
            columns = await connection.run_sync(lambda sync: {c["name"] for c in sa.inspect(sync).get_columns("conversations")})
    finally:
        await engine.dispose()
    assert "last_active_at" not in columns


def test_a_marketplace_migration_waits_for_the_gateways_own(tmp_path):
    """Alembic's running context is a module global: the gateway's migrations (its keys, files, batches
    tables) and the marketplace's run in threads at the same start, and two at once clobber each
    other's context (``'NoneType' object has no attribute 'configure'``, ``KeyError: 'config'``: the
    marketplace then answered 503 until its retry). One lock for both: while the gateway's migration
    holds it, the marketplace's does not start."""
    import threading

    from gateway.database.migrations.runner import ALEMBIC_LOCK

    url = f"sqlite+aiosqlite:///{tmp_path}/marketplace.db"
    done = threading.Event()

    def migrate() -> None:
        upgrade_to(url, "head")
        done.set()

    with ALEMBIC_LOCK:  # (the gateway's migration, running)
        thread = threading.Thread(target=migrate, daemon=True)
        thread.start()
        # (a migration of this empty file takes well under this without the lock: it would have set `done`)
        assert not done.wait(3.0), "the marketplace migrated while the gateway's migration held Alembic"
    thread.join(60)
    assert done.is_set(), "the marketplace's migration did not finish once the gateway's was done"
    engine = sa.create_engine(f"sqlite:///{tmp_path}/marketplace.db")
    with engine.connect() as connection:
        assert connection.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar() == head_revision()
    engine.dispose()
