"""Run the gateway's migrations from code: at start (``GatewayDatabase.start``), in tests, or by hand.

By hand, from the repository root::

    python -m gateway.database.migrations.runner upgrade head   # DATABASE_URL from the environment
    python -m gateway.database.migrations.runner downgrade base

One history for every table of the gateway's own (``gateway.database.tables``), with one
version table, ``gateway_alembic_version``.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

from gateway.config import Settings
from gateway.database.engine import EngineLimits, normalize_url, sqlite_file

MIGRATIONS_DIR = Path(__file__).resolve().parent
VERSION_TABLE = "gateway_alembic_version"
# Alembic keeps its running migration context in module globals (``alembic.context``): one migration
# at a time per process, whoever's: the features' histories take this lock too (``gateway.api``), since
# the gateway's and a feature's migrations run in threads at the same start.
ALEMBIC_LOCK = threading.Lock()
# A migration may rebuild a table or an index of a large ledger, and it runs in the background
# (the features answer 503 meanwhile): its statements get longer than a request's, and a
# replica waiting for another's migration (the advisory lock) waits that long too.
MIGRATION_STATEMENT_TIMEOUT_SECONDS = 600.0


def alembic_config(url: str, limits: EngineLimits | None = None) -> Config:
    """``limits``: the serving engine's (the connect timeout is kept, the statement timeout is the migrations')."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    # Attributes, not ini options: ini values are %-interpolated (a "%" in a password).
    config.attributes["database_url"] = normalize_url(url)
    config.attributes["limits"] = dataclasses.replace(
        limits or EngineLimits(), statement_timeout_seconds=MIGRATION_STATEMENT_TIMEOUT_SECONDS)
    return config


def upgrade(url: str, revision: str = "head", *, limits: EngineLimits | None = None) -> None:
    """Blocking (run it in a thread): bring the database at ``url`` to ``revision``.

    A SQLite file's directory is created first (``./data/`` on a first start).
    """
    path = sqlite_file(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    with ALEMBIC_LOCK:
        command.upgrade(alembic_config(url, limits), revision)


def downgrade(url: str, revision: str) -> None:
    with ALEMBIC_LOCK:
        command.downgrade(alembic_config(url), revision)


def head_revision() -> str:
    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("upgrade", "downgrade"):
        print("usage: python -m gateway.database.migrations.runner upgrade|downgrade REVISION", file=sys.stderr)
        return 2
    url = os.environ.get("DATABASE_URL") or Settings.model_fields["database_url"].default
    (upgrade if argv[0] == "upgrade" else downgrade)(url, argv[1])
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
