"""tests/marketplace/users/test_end_user_limits.py, on PostgreSQL (see suite.py)."""

import pytest

from tests.marketplace.suite import rerun_on_postgres
from tests.marketplace.users import test_end_user_limits as unit_tests

globals().update(rerun_on_postgres(unit_tests))


@pytest.fixture
def database_url(postgres_database_url: str) -> str:
    return postgres_database_url
