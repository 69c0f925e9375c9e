"""The offline work's tables (``gateway.jobs``): files, batches with their lines, webhook endpoints and the outbox.

Times are seconds since the epoch (floats): one representation on SQLite and PostgreSQL, and
what OpenAI's objects show (as integers). JSON values are stored as text. Every row that a
caller can reach carries ``owner`` (``jobs.owner``): today the API key's id. Changed only
through the gateway's one Alembic history (``gateway.database.migrations``).
"""

from __future__ import annotations

import sqlalchemy as sa

from gateway.database.metadata import metadata

files = sa.Table(
    "gateway_files", metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("owner", sa.String(64), nullable=False),
    sa.Column("purpose", sa.String(32), nullable=False),
    sa.Column("filename", sa.String(255), nullable=False),
    sa.Column("bytes", sa.BigInteger, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("expires_at", sa.Float, nullable=True),
    sa.Column("storage", sa.String(16), nullable=False),  # "database" or "directory"
    sa.Index("ix_gateway_files_owner_created", "owner", "created_at"),
    sa.Index("ix_gateway_files_expires", "expires_at"),
)

file_chunks = sa.Table(
    "gateway_file_chunks", metadata,
    sa.Column("file_id", sa.String(40), primary_key=True),
    sa.Column("seq", sa.Integer, primary_key=True),
    sa.Column("data", sa.LargeBinary, nullable=False),
)

batches = sa.Table(
    "gateway_batches", metadata,
    sa.Column("id", sa.String(48), primary_key=True),
    sa.Column("owner", sa.String(64), nullable=False),
    sa.Column("api", sa.String(16), nullable=False),  # "openai" or "anthropic": which format it is shown in
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
    sa.Column("cached_tokens", sa.BigInteger, nullable=False, server_default="0"),  # of input_tokens
    sa.Column("reasoning_tokens", sa.BigInteger, nullable=False, server_default="0"),  # of output_tokens
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("expires_at", sa.Float, nullable=False),
    sa.Column("in_progress_at", sa.Float, nullable=True),
    sa.Column("finalizing_at", sa.Float, nullable=True),
    sa.Column("completed_at", sa.Float, nullable=True),
    sa.Column("failed_at", sa.Float, nullable=True),
    sa.Column("expired_at", sa.Float, nullable=True),
    sa.Column("cancelling_at", sa.Float, nullable=True),
    sa.Column("cancelled_at", sa.Float, nullable=True),
    sa.Column("ended_as", sa.String(16), nullable=True),  # finalizing: the status it ends in
    # OpenAI's output_expires_after.seconds: the output and error files live this long from their writing.
    sa.Column("output_expires_after", sa.Float, nullable=True),
    sa.Column("deleted_at", sa.Float, nullable=True),
    # The lease: the replica running the batch, until when, and a counter raised at every
    # take-over (a line's result is kept only under the epoch it was started in).
    sa.Column("lease_owner", sa.String(32), nullable=True),
    sa.Column("lease_until", sa.Float, nullable=True),
    sa.Column("lease_epoch", sa.Integer, nullable=False, server_default="0"),
    sa.Index("ix_gateway_batches_owner_created", "owner", "created_at"),
    sa.Index("ix_gateway_batches_status", "status"),
)

batch_lines = sa.Table(
    "gateway_batch_lines", metadata,
    sa.Column("batch_id", sa.String(48), primary_key=True),
    sa.Column("line", sa.Integer, primary_key=True),  # 1-based, the input file's line number
    sa.Column("custom_id", sa.String(255), nullable=False),
    sa.Column("body", sa.Text, nullable=False),
    sa.Column("state", sa.String(8), nullable=False),  # pending, running, done
    sa.Column("epoch", sa.Integer, nullable=True),  # the batch's lease epoch it runs under
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("outcome", sa.String(12), nullable=True),  # succeeded, errored, cancelled, expired
    sa.Column("status_code", sa.Integer, nullable=True),
    sa.Column("response", sa.Text, nullable=True),
    sa.Column("error", sa.Text, nullable=True),
    sa.Column("finished_at", sa.Float, nullable=True),
    sa.Index("ix_gateway_batch_lines_state", "batch_id", "state"),
)

webhook_endpoints = sa.Table(
    "gateway_webhook_endpoints", metadata,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("key_id", sa.String(64), nullable=True),
    sa.Column("team_id", sa.String(64), nullable=True),  # reserved for teams (issue 24)
    sa.Column("url", sa.Text, nullable=False),
    sa.Column("secret", sa.String(128), nullable=False),
    sa.Column("events", sa.Text, nullable=False),
    sa.Column("description", sa.String(255), nullable=True),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Index("ix_gateway_webhook_endpoints_key", "key_id"),
)

webhook_outbox = sa.Table(
    "gateway_webhook_outbox", metadata,
    sa.Column("id", sa.String(48), primary_key=True),  # one delivery: an event to one endpoint
    sa.Column("event_id", sa.String(40), nullable=False),  # webhook-id: the same on every attempt
    sa.Column("endpoint_id", sa.String(40), nullable=False),
    sa.Column("event_type", sa.String(40), nullable=False),
    sa.Column("payload", sa.Text, nullable=False),
    sa.Column("state", sa.String(12), nullable=False),  # pending, delivered, failed
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("next_attempt_at", sa.Float, nullable=False),
    sa.Column("lease_owner", sa.String(32), nullable=True),
    sa.Column("lease_until", sa.Float, nullable=True),
    sa.Column("last_status", sa.Integer, nullable=True),
    sa.Column("last_error", sa.String(255), nullable=True),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("delivered_at", sa.Float, nullable=True),
    sa.Index("ix_gateway_webhook_outbox_due", "state", "next_attempt_at"),
)
