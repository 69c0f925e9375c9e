"""Re-collect the marketplace's database-backed tests against PostgreSQL.

Each ``test_*_postgres.py`` module here takes one unit module's fixtures and
its tests that use the database (those asking for ``client``, ``ai_client`` or
``database_url``), and binds ``database_url`` to a fresh PostgreSQL database
(``postgres_database_url``). So the very same tests run on both databases;
the root conftest marks these ``integration`` + ``postgres``.
"""

from __future__ import annotations

import inspect
from types import ModuleType

DATABASE_FIXTURES = {"client", "database_url", "ai_client"}


def rerun_on_postgres(module: ModuleType) -> dict[str, object]:
    """The names to copy into a PostgreSQL test module: fixtures and helpers, and DB-backed tests."""
    names: dict[str, object] = {}
    for name, value in vars(module).items():
        if name.startswith("_"):
            continue
        if name.startswith("test_"):
            if callable(value) and DATABASE_FIXTURES & set(inspect.signature(value).parameters):
                names[name] = value
        else:
            names[name] = value
    return names
