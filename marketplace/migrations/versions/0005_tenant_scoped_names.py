"""An email is unique per owning key, a conversation's name per user: no answer tells one app about another's.

Before, ``users.email`` was unique across the whole marketplace, so an app key registering an
email another app had registered got a 409: an oracle for who uses which application. And
``conversations.session_id`` was unique across every user, so a 409 on a chosen name told a
caller (an app, or an end user's token) that someone else's conversation had it.

- ``users``: the unique constraint moves from ``email`` to ``(owner_key_id, email)``: each
  app key (and each admin key) has its own users, and only a duplicate among them is a 409.
  Rows from before ownership (``owner_key_id`` NULL) were unique across everything and stay so
  among themselves (no new row is ever ownerless).
- ``conversations``: ``session_id`` is renamed ``name`` (what it is: the name the client gave
  a conversation, sent as ``session_id`` on the API) and is unique per user,
  ``(user_id, name)``: every user has their own names.

SQLite changes a constraint by rebuilding the table (Alembic's batch mode; ``env.py`` turns
foreign keys off for it, so the copy keeps every row that refers to the table). The downgrade
restores the global constraints and refuses, naming the count, when rows that the new rules
allow would break them (the same email under two keys, the same name for two users).

Revision ID: 0005
Revises: 0004
Create Date: 2027-03-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# SQLite's constraints of 0001 have no names: reflected under this convention, batch mode can drop them.
SQLITE_NAMES = {"uq": "uq_%(table_name)s_%(column_0_name)s"}
# PostgreSQL named them itself (<table>_<column>_key).
OLD_UNIQUE = {"sqlite": {"users": "uq_users_email", "conversations": "uq_conversations_session_id"},
              "postgresql": {"users": "users_email_key", "conversations": "conversations_session_id_key"}}


def _old_name(table: str) -> str:
    return OLD_UNIQUE[op.get_bind().dialect.name][table]


def upgrade() -> None:
    with op.batch_alter_table("users", naming_convention=SQLITE_NAMES) as batch:
        batch.drop_constraint(_old_name("users"), type_="unique")
        batch.create_unique_constraint("uq_users_owner_email", ["owner_key_id", "email"])
    with op.batch_alter_table("conversations", naming_convention=SQLITE_NAMES) as batch:
        batch.drop_constraint(_old_name("conversations"), type_="unique")
        batch.create_unique_constraint("uq_conversations_user_name", ["user_id", "session_id"])
    # Both databases rename a column in place (SQLite 3.25+), constraints included.
    op.execute("ALTER TABLE conversations RENAME COLUMN session_id TO name")


def _refuse_if_shared(connection, table: str, column: str, what: str) -> None:
    shared = connection.scalar(sa.text(
        f"SELECT count(*) FROM (SELECT {column} FROM {table} GROUP BY {column} HAVING count(*) > 1) AS shared"))
    if shared:
        raise RuntimeError(f"cannot downgrade below 0005: {shared} {what} (allowed since 0005, not before); "
                           "erase or rename them first")


def downgrade() -> None:
    connection = op.get_bind()
    _refuse_if_shared(connection, "users", "email", "emails are registered under more than one key")
    _refuse_if_shared(connection, "conversations", "name", "conversation names are used by more than one user")
    op.execute("ALTER TABLE conversations RENAME COLUMN name TO session_id")
    with op.batch_alter_table("conversations", naming_convention=SQLITE_NAMES) as batch:
        batch.drop_constraint("uq_conversations_user_name", type_="unique")
        batch.create_unique_constraint(_old_name("conversations"), ["session_id"])
    with op.batch_alter_table("users", naming_convention=SQLITE_NAMES) as batch:
        batch.drop_constraint("uq_users_owner_email", type_="unique")
        batch.create_unique_constraint(_old_name("users"), ["email"])
