"""Tenancy's tables: keys, teams, the usage ledger and the change counter (``gateway.tenancy``).

- ``gateway_teams``: a team's name, limits (JSON), priority band and weight;
- ``gateway_keys``: a key's name, role, team, models, limits, priority, weight, expiry and
  revocation; never its secret;
- ``gateway_key_secrets``: the digests of a key's secrets: the current one, and a rotated-out
  one until its grace period ends (``expires_at``);
- ``gateway_usage``: the ledger, one row per (hour, key, team, end user, model) with its sums;
- ``gateway_state``: one row, ``version``, raised in the same transaction as every change of a
  key or team, which every replica polls to drop its cache of resolved keys.

Times are UTC. Changed only through the gateway's one Alembic history (``gateway.database.migrations``).
"""

from __future__ import annotations

import sqlalchemy as sa

from gateway.database.metadata import metadata

TIMESTAMP = sa.DateTime(timezone=True)
NO_TEAM = ""  # the ledger's team column for keys without a team (part of its primary key)
NO_USER = ""

teams = sa.Table(
    "gateway_teams", metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("limits", sa.Text(), nullable=False, server_default="{}"),
    sa.Column("priority", sa.String(16), nullable=False, server_default="standard"),
    sa.Column("weight", sa.Float(), nullable=False, server_default="1"),
    sa.Column("created_at", TIMESTAMP, nullable=False),
    sa.Column("updated_at", TIMESTAMP, nullable=False),
)

keys = sa.Table(
    "gateway_keys", metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("role", sa.String(8), nullable=False),
    sa.Column("team_id", sa.String(32), sa.ForeignKey("gateway_teams.id"), nullable=True, index=True),
    sa.Column("models", sa.Text(), nullable=True),  # JSON list; NULL: every model
    sa.Column("limits", sa.Text(), nullable=False, server_default="{}"),
    sa.Column("priority", sa.String(16), nullable=True),  # NULL: the team's, else standard
    sa.Column("weight", sa.Float(), nullable=True),
    sa.Column("prefix", sa.String(16), nullable=False),
    sa.Column("expires_at", TIMESTAMP, nullable=True),
    sa.Column("revoked_at", TIMESTAMP, nullable=True),
    sa.Column("created_at", TIMESTAMP, nullable=False),
    sa.Column("updated_at", TIMESTAMP, nullable=False),
)

key_secrets = sa.Table(
    "gateway_key_secrets", metadata,
    sa.Column("digest", sa.String(64), primary_key=True),
    sa.Column("key_id", sa.String(32), sa.ForeignKey("gateway_keys.id", ondelete="CASCADE"), nullable=False,
              index=True),
    sa.Column("created_at", TIMESTAMP, nullable=False),
    sa.Column("expires_at", TIMESTAMP, nullable=True),  # set when rotated out: the end of its grace
)

usage = sa.Table(
    "gateway_usage", metadata,
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
sa.Index("ix_gateway_usage_team_hour", usage.c.team_id, usage.c.hour)
sa.Index("ix_gateway_usage_key_hour", usage.c.key_id, usage.c.hour)

state = sa.Table(
    "gateway_state", metadata,
    sa.Column("id", sa.Integer(), primary_key=True),
    sa.Column("version", sa.BigInteger(), nullable=False),
)
