"""Run the marketplace's database-backed tests on PostgreSQL too, and make sure none is left out.

The tests mirror the package: one folder per part (``catalogue/``, ``search/``, ``users/``, ...).
Each ``test_*_postgres.py`` module is the twin of the SQLite module beside it: it copies that
module's fixtures, helpers and every test (``rerun_on_postgres``), and binds ``database_url``
to a fresh PostgreSQL database (``postgres_database_url``); the root conftest marks these
``integration`` + ``postgres``. Which tests use the database is pytest's own answer, not a
guess from a signature: the hook below (run from this folder's conftest) keeps a twin's test
only when ``database_url`` is in its fixture closure, however indirectly it gets there
(``client`` -> ``settings`` -> ``database_url``, or a fixture of the test module's own), and
drops the rest, which would only run the same code twice.

The other half is a check that fails: a test of this folder (or of a folder below it) whose closure holds
``database_url`` (and no PostgreSQL fixture: then it runs there already) while its module
has no twin stops the collection, naming it. A test that
is about SQLite alone says so with ``@pytest.mark.sqlite_only("why")``.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

DATABASE_FIXTURE = "database_url"
# A test that reaches one of these already runs on PostgreSQL.
POSTGRES_FIXTURES = frozenset({"postgres_server", "postgres_dsn", "postgres_database_url", "stoppable_postgres"})
TWIN_SUFFIX = "_postgres"
RERUN_OF = "__rerun_of__"  # set in a twin module: the name of the module it re-runs

FOLDER = Path(__file__).resolve().parent


def rerun_on_postgres(module: ModuleType) -> dict[str, object]:
    """The names to copy into a PostgreSQL twin: every public name of ``module`` (the hook sorts the tests)."""
    names = {name: value for name, value in vars(module).items() if not name.startswith("_")}
    names[RERUN_OF] = module.__name__
    return names


def twin_path(path: Path) -> Path:
    return path.with_name(f"{path.stem}{TWIN_SUFFIX}{path.suffix}")


def sort_items(config: pytest.Config, items: list[pytest.Item], *, folder: Path = FOLDER) -> None:
    """Drop twin tests that never reach the database; fail on database tests of ``folder`` that have no twin."""
    kept, dropped, missing = [], [], []
    folder = folder.resolve()
    for item in items:
        path = Path(str(item.path)).resolve()
        if folder not in path.parents or not path.name.startswith("test_"):
            kept.append(item)
            continue
        fixtures = set(getattr(item, "fixturenames", ()))
        uses_database = DATABASE_FIXTURE in fixtures
        sqlite_only = item.get_closest_marker("sqlite_only") is not None
        module = getattr(item, "module", None)
        if module is not None and hasattr(module, RERUN_OF):
            (kept if uses_database and not sqlite_only else dropped).append(item)
            continue
        on_postgres = bool(fixtures & POSTGRES_FIXTURES)
        if uses_database and not (sqlite_only or on_postgres) and not twin_path(path).exists():
            missing.append(item.nodeid)
        kept.append(item)
    if missing:
        raise pytest.UsageError(
            "these marketplace tests use the database but would never run on PostgreSQL "
            f"(add a {TWIN_SUFFIX}.py twin beside their module, see tests/marketplace/suite.py, or mark them "
            "@pytest.mark.sqlite_only(reason)):\n  " + "\n  ".join(missing))
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
