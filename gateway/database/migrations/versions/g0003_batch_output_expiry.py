"""A batch's ``output_expires_after``: how long its output and error files live (OpenAI's create parameter).

Revision ID: g0003
Revises: g0002
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "g0003"
down_revision: str | Sequence[str] | None = "g0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("gateway_batches") as table:
        table.add_column(sa.Column("output_expires_after", sa.Float, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("gateway_batches") as table:
        table.drop_column("output_expires_after")
