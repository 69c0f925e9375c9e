"""tests/marketplace/search/test_search.py, on PostgreSQL (see suite.py)."""

import pytest

from tests.marketplace.search import test_search as unit_tests
from tests.marketplace.suite import rerun_on_postgres

globals().update(rerun_on_postgres(unit_tests))


@pytest.fixture
def database_url(postgres_database_url: str) -> str:
    return postgres_database_url
