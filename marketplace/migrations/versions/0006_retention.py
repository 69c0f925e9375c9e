"""What the clean-up needs to find old conversations and dead tokens by index.

- ``conversations.last_active_at``: when the conversation was last used (opened, or an exchange
  stored); conversations inactive longer than ``MARKETPLACE_CONVERSATION_RETENTION_DAYS`` are
  deleted with their messages. Existing rows get the time of their newest message, or their
  creation when they have none. Nullable in the schema (SQLite adds a column without rebuilding
  the table only so); the application always sets it.
- indexes on ``conversations.last_active_at``, ``user_tokens.expires_at`` and
  ``user_tokens.issued_by`` (tokens of a key that was removed are deleted too).

Revision ID: 0006
Revises: 0005
Create Date: 2027-03-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("conversations", sa.Column("last_active_at", sa.DateTime(timezone=True), nullable=True))
    op.execute("UPDATE conversations SET last_active_at = coalesce("
               "(SELECT max(messages.timestamp) FROM messages WHERE messages.conversation_id = conversations.id), "
               "created_at)")
    op.create_index("ix_conversations_last_active_at", "conversations", ["last_active_at"])
    op.create_index("ix_user_tokens_expires_at", "user_tokens", ["expires_at"])
    op.create_index("ix_user_tokens_issued_by", "user_tokens", ["issued_by"])


def downgrade() -> None:
    op.drop_index("ix_user_tokens_issued_by", table_name="user_tokens")
    op.drop_index("ix_user_tokens_expires_at", table_name="user_tokens")
    op.drop_index("ix_conversations_last_active_at", table_name="conversations")
    # Plain DROP COLUMN (SQLite 3.35+): no table rebuild.
    op.execute("ALTER TABLE conversations DROP COLUMN last_active_at")
