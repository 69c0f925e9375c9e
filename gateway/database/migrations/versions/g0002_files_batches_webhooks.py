"""Files (and their chunks), batches and their lines, webhook endpoints and the delivery outbox.

Revision ID: g0002
Revises: g0001
Create Date: 2027-03-10
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "g0002"
down_revision: str | Sequence[str] | None = "g0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "gateway_files",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("purpose", sa.String(32), nullable=False),
        sa.Column("filename", sa.String(255), nullable=False),
        sa.Column("bytes", sa.BigInteger, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=True),
        sa.Column("storage", sa.String(16), nullable=False),
    )
    op.create_index("ix_gateway_files_owner_created", "gateway_files", ["owner", "created_at"])
    op.create_index("ix_gateway_files_expires", "gateway_files", ["expires_at"])
    op.create_table(
        "gateway_file_chunks",
        sa.Column("file_id", sa.String(40), primary_key=True),
        sa.Column("seq", sa.Integer, primary_key=True),
        sa.Column("data", sa.LargeBinary, nullable=False),
    )
    op.create_table(
        "gateway_batches",
        sa.Column("id", sa.String(48), primary_key=True),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("api", sa.String(16), nullable=False),
        sa.Column("endpoint", sa.String(64), nullable=False),
        sa.Column("input_file_id", sa.String(40), nullable=True),
        sa.Column("completion_window", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("metadata", sa.Text, nullable=True),
        sa.Column("model", sa.String(255), nullable=True),
        sa.Column("errors", sa.Text, nullable=True),
        sa.Column("output_file_id", sa.String(40), nullable=True),
        sa.Column("error_file_id", sa.String(40), nullable=True),
        sa.Column("total", sa.Integer, nullable=False, server_default="0"),
        sa.Column("completed", sa.Integer, nullable=False, server_default="0"),
        sa.Column("failed", sa.Integer, nullable=False, server_default="0"),
        sa.Column("input_tokens", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("output_tokens", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
        sa.Column("in_progress_at", sa.Float, nullable=True),
        sa.Column("finalizing_at", sa.Float, nullable=True),
        sa.Column("completed_at", sa.Float, nullable=True),
        sa.Column("failed_at", sa.Float, nullable=True),
        sa.Column("expired_at", sa.Float, nullable=True),
        sa.Column("cancelling_at", sa.Float, nullable=True),
        sa.Column("cancelled_at", sa.Float, nullable=True),
        sa.Column("ended_as", sa.String(16), nullable=True),
        sa.Column("deleted_at", sa.Float, nullable=True),
        sa.Column("lease_owner", sa.String(32), nullable=True),
        sa.Column("lease_until", sa.Float, nullable=True),
        sa.Column("lease_epoch", sa.Integer, nullable=False, server_default="0"),
    )
    op.create_index("ix_gateway_batches_owner_created", "gateway_batches", ["owner", "created_at"])
    op.create_index("ix_gateway_batches_status", "gateway_batches", ["status"])
    op.create_table(
        "gateway_batch_lines",
        sa.Column("batch_id", sa.String(48), primary_key=True),
        sa.Column("line", sa.Integer, primary_key=True),
        sa.Column("custom_id", sa.String(255), nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("state", sa.String(8), nullable=False),
        sa.Column("epoch", sa.Integer, nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("outcome", sa.String(12), nullable=True),
        sa.Column("status_code", sa.Integer, nullable=True),
        sa.Column("response", sa.Text, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("finished_at", sa.Float, nullable=True),
    )
    op.create_index("ix_gateway_batch_lines_state", "gateway_batch_lines", ["batch_id", "state"])
    op.create_table(
        "gateway_webhook_endpoints",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("key_id", sa.String(64), nullable=True),
        sa.Column("team_id", sa.String(64), nullable=True),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("secret", sa.String(128), nullable=False),
        sa.Column("events", sa.Text, nullable=False),
        sa.Column("description", sa.String(255), nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_index("ix_gateway_webhook_endpoints_key", "gateway_webhook_endpoints", ["key_id"])
    op.create_table(
        "gateway_webhook_outbox",
        sa.Column("id", sa.String(48), primary_key=True),
        sa.Column("event_id", sa.String(40), nullable=False),
        sa.Column("endpoint_id", sa.String(40), nullable=False),
        sa.Column("event_type", sa.String(40), nullable=False),
        sa.Column("payload", sa.Text, nullable=False),
        sa.Column("state", sa.String(12), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("next_attempt_at", sa.Float, nullable=False),
        sa.Column("lease_owner", sa.String(32), nullable=True),
        sa.Column("lease_until", sa.Float, nullable=True),
        sa.Column("last_status", sa.Integer, nullable=True),
        sa.Column("last_error", sa.String(255), nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("delivered_at", sa.Float, nullable=True),
    )
    op.create_index("ix_gateway_webhook_outbox_due", "gateway_webhook_outbox", ["state", "next_attempt_at"])


def downgrade() -> None:
    for table in ("gateway_webhook_outbox", "gateway_webhook_endpoints", "gateway_batch_lines", "gateway_batches",
                  "gateway_file_chunks", "gateway_files"):
        op.drop_table(table)
