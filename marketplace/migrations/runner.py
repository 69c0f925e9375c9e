"""Run the marketplace migrations from code: ``migrate`` at start-up, the others for tests and by hand."""

from __future__ import annotations

import asyncio
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

from gateway.api import ALEMBIC_LOCK
from marketplace.database.engines import ensure_database_directory, normalize_url

MIGRATIONS_DIR = Path(__file__).resolve().parent
ALEMBIC_INI = MIGRATIONS_DIR.parent / "alembic.ini"
# Its own version table, so the marketplace schema can share a database with
# other parts of the gateway that keep their own history.
VERSION_TABLE = "marketplace_alembic_version"


def alembic_config(url: str) -> Config:
    """An Alembic config for ``url`` that leaves the application's logging alone."""
    config = Config(str(ALEMBIC_INI))
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    # Passed as an attribute, not an ini option: ini values are %-interpolated,
    # which would mangle passwords containing "%".
    config.attributes["database_url"] = url
    config.attributes["configure_logging"] = False
    return config


async def migrate(url: str) -> None:
    """Bring the database at ``url`` to the newest schema (Alembic ``upgrade head``)."""
    await ensure_database_directory(url)
    # Alembic's command API is synchronous (it reads script files and, in our
    # env.py, runs its own event loop): keep it off the caller's loop.
    await asyncio.to_thread(upgrade_to_head, normalize_url(url))


def upgrade_to_head(url: str) -> None:
    """Blocking: upgrade the database at ``url`` to the newest revision."""
    upgrade_to(url, "head")


def upgrade_to(url: str, revision: str) -> None:
    """Blocking: upgrade the database at ``url`` to ``revision``."""
    with ALEMBIC_LOCK:  # (Alembic's globals: one migration at a time per process, the gateway's included)
        command.upgrade(alembic_config(url), revision)


def downgrade_to(url: str, revision: str) -> None:
    """Blocking: downgrade the database at ``url`` to ``revision``."""
    with ALEMBIC_LOCK:  # (Alembic's globals: one migration at a time per process, the gateway's included)
        command.downgrade(alembic_config(url), revision)


def head_revision() -> str:
    """The newest revision id."""
    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
