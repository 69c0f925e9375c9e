"""Search at a million products: distance bounds, word and trigram text indexes, a cursor key.

- ``suppliers.ux/uy/uz``: each supplier's position as a unit vector, filled here for
  existing rows. The search compares squared chords with them to skip the exact distance
  for suppliers plainly inside or outside a radius (``marketplace.places.sphere``). Nullable: a row
  written around the application without them is only slower to search, never wrong.
- PostgreSQL: ``products.words``, a stored weighted tsvector (name A, tags B, description C)
  with the ``simple`` configuration over the text lower-cased (ASCII) and cut into runs of
  ASCII letters and digits (``product_words()``), with a GIN index: two-letter terms ("hp",
  "tv") match whole words through it. Longer terms keep the trigram indexes of 0001. The
  column is not in the ORM models (the SQLite schema has no such column).
- SQLite: ``products_fts``, an FTS5 table with the trigram tokenizer over the same three
  columns (external content: the rows stay in ``products``, triggers keep the index in
  step), so a term of three or more letters finds its candidate rows without a scan. Needs
  SQLite 3.34 or newer.
- ``marketplace_secrets`` with a random ``cursor_signing_key``: search cursors are signed
  with it, and every worker and replica on this database reads the same key.

Revision ID: 0003
Revises: 0002
Create Date: 2027-01-20
"""

import math
import secrets
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BATCH = 5000
FTS_MIN_SQLITE = (3, 34, 0)

PRODUCT_WORDS = r"""
CREATE OR REPLACE FUNCTION product_words(name text, tags text, description text) RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT setweight(to_tsvector('simple'::regconfig,
                                 regexp_replace(lower(name COLLATE "C"), '[^a-z0-9]+', ' ', 'g')), 'A')
        || setweight(to_tsvector('simple'::regconfig,
                                 regexp_replace(lower(tags COLLATE "C"), '[^a-z0-9]+', ' ', 'g')), 'B')
        || setweight(to_tsvector('simple'::regconfig,
                                 regexp_replace(lower(description COLLATE "C"), '[^a-z0-9]+', ' ', 'g')), 'C')
$$;
"""

FTS_TABLE = ("CREATE VIRTUAL TABLE products_fts USING fts5(name, tags_text, description, "
             "content='products', content_rowid='id', tokenize='trigram')")
FTS_TRIGGERS = (
    """CREATE TRIGGER products_fts_insert AFTER INSERT ON products BEGIN
        INSERT INTO products_fts(rowid, name, tags_text, description)
        VALUES (new.id, new.name, new.tags_text, new.description);
    END""",
    """CREATE TRIGGER products_fts_delete AFTER DELETE ON products BEGIN
        INSERT INTO products_fts(products_fts, rowid, name, tags_text, description)
        VALUES ('delete', old.id, old.name, old.tags_text, old.description);
    END""",
    """CREATE TRIGGER products_fts_update AFTER UPDATE OF name, tags_text, description ON products BEGIN
        INSERT INTO products_fts(products_fts, rowid, name, tags_text, description)
        VALUES ('delete', old.id, old.name, old.tags_text, old.description);
        INSERT INTO products_fts(rowid, name, tags_text, description)
        VALUES (new.id, new.name, new.tags_text, new.description);
    END""",
)


def _unit_vector(lat: float, lng: float) -> tuple[float, float, float]:
    phi, lam = math.radians(lat), math.radians(lng)
    return (math.cos(phi) * math.cos(lam), math.cos(phi) * math.sin(lam), math.sin(phi))


def _fill_unit_vectors(connection) -> None:
    suppliers = sa.table("suppliers", sa.column("id"), sa.column("lat"), sa.column("lng"),
                         sa.column("ux"), sa.column("uy"), sa.column("uz"))
    last_id = 0
    while True:
        rows = connection.execute(
            sa.select(suppliers.c.id, suppliers.c.lat, suppliers.c.lng)
            .where(suppliers.c.id > last_id).order_by(suppliers.c.id).limit(BATCH)
        ).all()
        if not rows:
            return
        last_id = rows[-1].id
        values = []
        for row in rows:
            ux, uy, uz = _unit_vector(row.lat, row.lng)
            values.append({"row_id": row.id, "x": ux, "y": uy, "z": uz})
        connection.execute(
            suppliers.update().where(suppliers.c.id == sa.bindparam("row_id"))
            .values(ux=sa.bindparam("x"), uy=sa.bindparam("y"), uz=sa.bindparam("z")),
            values,
        )


def upgrade() -> None:
    connection = op.get_bind()
    is_postgresql = connection.dialect.name == "postgresql"
    for column in ("ux", "uy", "uz"):
        op.add_column("suppliers", sa.Column(column, sa.Float(), nullable=True))
    _fill_unit_vectors(connection)

    secrets_table = op.create_table(
        "marketplace_secrets",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("value", sa.String(256), nullable=False),
    )
    op.bulk_insert(secrets_table, [{"name": "cursor_signing_key", "value": secrets.token_urlsafe(32)}])

    if is_postgresql:
        op.execute(PRODUCT_WORDS)
        # Stored, not an expression index: a plan driven by suppliers filters each of their
        # products on it, and recomputing the tsvector there costs ~25 us a row.
        op.execute("ALTER TABLE products ADD COLUMN words tsvector "
                   "GENERATED ALWAYS AS (product_words(name, tags_text, description)) STORED")
        op.execute("CREATE INDEX ix_products_words ON products USING gin (words)")
    else:
        version = tuple(int(part) for part in connection.exec_driver_sql("SELECT sqlite_version()").scalar().split("."))
        if version < FTS_MIN_SQLITE:
            raise RuntimeError(f"the marketplace search needs SQLite {'.'.join(map(str, FTS_MIN_SQLITE))} or newer "
                               "(FTS5 with the trigram tokenizer); "
                               f"this Python uses SQLite {'.'.join(map(str, version))}")
        op.execute(FTS_TABLE)
        for trigger in FTS_TRIGGERS:
            op.execute(trigger)
        op.execute("INSERT INTO products_fts(products_fts) VALUES ('rebuild')")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP INDEX IF EXISTS ix_products_words")
        op.execute("ALTER TABLE products DROP COLUMN IF EXISTS words")
        op.execute("DROP FUNCTION IF EXISTS product_words(text, text, text)")
    else:
        for trigger in ("products_fts_insert", "products_fts_delete", "products_fts_update"):
            op.execute(f"DROP TRIGGER IF EXISTS {trigger}")
        op.execute("DROP TABLE IF EXISTS products_fts")
    op.drop_table("marketplace_secrets")
    for column in ("uz", "uy", "ux"):
        op.drop_column("suppliers", column)
