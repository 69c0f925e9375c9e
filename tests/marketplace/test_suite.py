"""The two-database suite's check (suite.py), on a small test folder collected by a real pytest.

The folder mirrors this one: a support module whose ``client`` needs ``settings``, which needs
``database_url``; SQLite modules, at its top or in a part's folder below; twins that re-run
them with ``database_url`` bound elsewhere.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

CONFTEST = """
from pathlib import Path

from tests.marketplace.suite import sort_items


def pytest_configure(config):
    config.addinivalue_line("markers", "sqlite_only(reason): SQLite alone")


def pytest_collection_modifyitems(config, items):
    sort_items(config, items, folder=Path(__file__).parent)
"""

SUPPORT = """
import pytest


@pytest.fixture
def database_url():
    return "sqlite"


@pytest.fixture
def settings(database_url):
    return {"database": database_url}


@pytest.fixture
def client(settings):
    return settings
"""

UNIT = """
import pytest

from support import client, database_url, settings


@pytest.fixture
def shop(client):  # the database reached through a fixture of the module's own
    return client


def test_indirect(shop):
    assert shop["database"]


def test_direct(client):
    assert client["database"]


def test_pure():
    assert True


@pytest.mark.sqlite_only("about SQLite")
def test_sqlite_pragma(client):
    assert client["database"] == "sqlite"
"""

ON_POSTGRES = """
import pytest

from support import client, settings


@pytest.fixture
def postgres_database_url():  # stands for the real fixture of tests/support/postgres.py
    return "postgresql"


@pytest.fixture
def database_url(postgres_database_url):
    return postgres_database_url


def test_on_postgres_already(client):
    assert client["database"] == "postgresql"
"""

TWIN = """
import pytest

import test_shop as unit_tests
from tests.marketplace.suite import rerun_on_postgres

globals().update(rerun_on_postgres(unit_tests))


@pytest.fixture
def database_url():
    return "postgresql"
"""


def collect(folder: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{folder}"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "--rootdir", str(folder),
         "-c", str(folder / "pytest.ini"), str(folder)],
        cwd=folder, env=env, capture_output=True, text=True, timeout=120)


# The shop's tests at the top of the folder, or in a part's folder below it (the layout of
# tests/marketplace: one folder per part of the package).
PARTS = ["", "shop/"]


@pytest.fixture(params=PARTS, ids=["top", "part"])
def part(request) -> str:
    return request.param


@pytest.fixture
def folder(tmp_path: Path, part: str) -> Path:
    (tmp_path / part).mkdir(exist_ok=True)
    for name, text in {"pytest.ini": "[pytest]\n", "conftest.py": CONFTEST, "support.py": SUPPORT,
                       f"{part}test_shop.py": UNIT, f"{part}test_outage.py": ON_POSTGRES}.items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    return tmp_path


def test_a_twin_reruns_every_test_that_reaches_the_database_however_indirectly(folder, part):
    (folder / f"{part}test_shop_postgres.py").write_text(TWIN)
    done = collect(folder)
    assert done.returncode == 0, done.stdout + done.stderr
    ran = {line.split(" ")[0] for line in done.stdout.splitlines() if line.endswith("%]") and " PASSED " in line}
    assert ran == {f"{part}{test}" for test in (
        "test_shop.py::test_indirect", "test_shop.py::test_direct", "test_shop.py::test_pure",
        "test_shop.py::test_sqlite_pragma",
        "test_shop_postgres.py::test_indirect", "test_shop_postgres.py::test_direct",
        "test_outage.py::test_on_postgres_already",
    )}, done.stdout
    assert "2 deselected" in done.stdout


def test_a_database_test_without_a_twin_stops_the_collection_naming_it(folder, part):
    done = collect(folder)
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert "would never run on PostgreSQL" in output
    assert f"{part}test_shop.py::test_indirect" in output and f"{part}test_shop.py::test_direct" in output
    assert "test_pure" not in output and "test_sqlite_pragma" not in output
    assert "test_on_postgres_already" not in output  # a test of PostgreSQL's own needs no twin
