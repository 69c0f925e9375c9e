"""A batch's cached and reasoning tokens, summed from its lines (OpenAI's ``usage.*_tokens_details``).

Revision ID: g0004
Revises: g0003
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "g0004"
down_revision: str | Sequence[str] | None = "g0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("gateway_batches") as table:
        table.add_column(sa.Column("cached_tokens", sa.BigInteger, nullable=False, server_default="0"))
        table.add_column(sa.Column("reasoning_tokens", sa.BigInteger, nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("gateway_batches") as table:
        table.drop_column("reasoning_tokens")
        table.drop_column("cached_tokens")
