"""Users and conversations owned by API keys, known by UUIDs; end-user tokens.

- ``users.public_id`` and ``conversations.public_id``: a random UUID for every row (existing
  rows get theirs here), unique; the integer ids stay the internal keys (foreign keys, joins)
  and are no longer shown. Nullable in the schema: SQLite cannot make an added column NOT NULL
  without rebuilding the table, which with foreign keys on would cascade-delete the rows that
  refer to it; the application always sets it.
- ``users.owner_key_id`` and ``conversations.owner_key_id``: the key id of the API key that
  created the row. Existing rows keep NULL: nobody knows which key made them, and only admin
  keys see them (``marketplace.users.access``).
- ``user_tokens``: end-user tokens, by their SHA-256 only, with expiry and revocation.

Revision ID: 0004
Revises: 0003
Create Date: 2027-02-01
"""

import uuid
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BATCH = 5000
OWNED = ("users", "conversations")
TIMESTAMP = sa.DateTime(timezone=True)


def _fill_public_ids(connection, name: str) -> None:
    table = sa.table(name, sa.column("id"), sa.column("public_id"))
    last_id = 0
    while True:
        ids = connection.execute(sa.select(table.c.id).where(table.c.id > last_id)
                                 .order_by(table.c.id).limit(BATCH)).scalars().all()
        if not ids:
            return
        last_id = ids[-1]
        connection.execute(table.update().where(table.c.id == sa.bindparam("row_id"))
                           .values(public_id=sa.bindparam("uuid")),
                           [{"row_id": row_id, "uuid": str(uuid.uuid4())} for row_id in ids])


def upgrade() -> None:
    connection = op.get_bind()
    for name in OWNED:
        op.add_column(name, sa.Column("public_id", sa.String(36), nullable=True))
        op.add_column(name, sa.Column("owner_key_id", sa.String(64), nullable=True))
        _fill_public_ids(connection, name)
        op.create_index(f"ix_{name}_public_id", name, ["public_id"], unique=True)
    op.create_index("ix_users_owner_key_id", "users", ["owner_key_id"])
    op.create_table(
        "user_tokens",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("user_id", sa.Integer(), sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
        sa.Column("issued_by", sa.String(64), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("expires_at", TIMESTAMP, nullable=False),
        sa.Column("revoked_at", TIMESTAMP, nullable=True),
    )
    op.create_index("ix_user_tokens_user_id", "user_tokens", ["user_id"])


def downgrade() -> None:
    op.drop_index("ix_user_tokens_user_id", table_name="user_tokens")
    op.drop_table("user_tokens")
    op.drop_index("ix_users_owner_key_id", table_name="users")
    for name in reversed(OWNED):
        op.drop_index(f"ix_{name}_public_id", table_name=name)
        # Plain DROP COLUMN (SQLite 3.35+): no table rebuild, so no cascade through foreign keys.
        op.execute(f"ALTER TABLE {name} DROP COLUMN owner_key_id")
        op.execute(f"ALTER TABLE {name} DROP COLUMN public_id")
