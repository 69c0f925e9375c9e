"""tests/unit/marketplace/test_ai_search.py, on PostgreSQL (see suite.py)."""

import pytest

from tests.integration.marketplace.suite import rerun_on_postgres
from tests.unit.marketplace import test_ai_search as unit_tests

globals().update(rerun_on_postgres(unit_tests))


@pytest.fixture
def database_url(postgres_database_url: str) -> str:
    return postgres_database_url
