"""Teams, keys (digests of their secrets only), the usage ledger, and the change counter.

Revision ID: g0001
Revises:
Create Date: 2027-03-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "g0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "gateway_teams",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("limits", sa.Text(), nullable=False, server_default="{}"),
        sa.Column("priority", sa.String(16), nullable=False, server_default="standard"),
        sa.Column("weight", sa.Float(), nullable=False, server_default="1"),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
    )
    op.create_table(
        "gateway_keys",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("role", sa.String(8), nullable=False),
        sa.Column("team_id", sa.String(32), sa.ForeignKey("gateway_teams.id"), nullable=True),
        sa.Column("models", sa.Text(), nullable=True),
        sa.Column("limits", sa.Text(), nullable=False, server_default="{}"),
        sa.Column("priority", sa.String(16), nullable=True),
        sa.Column("weight", sa.Float(), nullable=True),
        sa.Column("prefix", sa.String(16), nullable=False),
        sa.Column("expires_at", TIMESTAMP, nullable=True),
        sa.Column("revoked_at", TIMESTAMP, nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
    )
    op.create_index("ix_gateway_keys_team_id", "gateway_keys", ["team_id"])
    op.create_table(
        "gateway_key_secrets",
        sa.Column("digest", sa.String(64), primary_key=True),
        sa.Column("key_id", sa.String(32), sa.ForeignKey("gateway_keys.id", ondelete="CASCADE"), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("expires_at", TIMESTAMP, nullable=True),
    )
    op.create_index("ix_gateway_key_secrets_key_id", "gateway_key_secrets", ["key_id"])
    op.create_table(
        "gateway_usage",
        sa.Column("hour", TIMESTAMP, primary_key=True),
        sa.Column("key_id", sa.String(32), primary_key=True),
        sa.Column("team_id", sa.String(32), primary_key=True),
        sa.Column("end_user", sa.String(128), primary_key=True),
        sa.Column("model", sa.String(200), primary_key=True),
        sa.Column("route", sa.String(64), primary_key=True),
        sa.Column("requests", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("prompt_tokens", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("completion_tokens", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("cached_tokens", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("reasoning_tokens", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("cost", sa.Float(), nullable=False, server_default="0"),
    )
    op.create_index("ix_gateway_usage_team_hour", "gateway_usage", ["team_id", "hour"])
    op.create_index("ix_gateway_usage_key_hour", "gateway_usage", ["key_id", "hour"])
    state = op.create_table(
        "gateway_state",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("version", sa.BigInteger(), nullable=False),
    )
    op.bulk_insert(state, [{"id": 1, "version": 1}])


def downgrade() -> None:
    op.drop_table("gateway_state")
    op.drop_index("ix_gateway_usage_key_hour", table_name="gateway_usage")
    op.drop_index("ix_gateway_usage_team_hour", table_name="gateway_usage")
    op.drop_table("gateway_usage")
    op.drop_index("ix_gateway_key_secrets_key_id", table_name="gateway_key_secrets")
    op.drop_table("gateway_key_secrets")
    op.drop_index("ix_gateway_keys_team_id", table_name="gateway_keys")
    op.drop_table("gateway_keys")
    op.drop_table("gateway_teams")
