"""tests/marketplace/catalogue/test_categories.py, on PostgreSQL (see suite.py)."""

import pytest

from tests.marketplace.catalogue import test_categories as unit_tests
from tests.marketplace.suite import rerun_on_postgres

globals().update(rerun_on_postgres(unit_tests))


@pytest.fixture
def database_url(postgres_database_url: str) -> str:
    return postgres_database_url
