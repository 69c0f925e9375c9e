"""tests/marketplace/chat/test_chat_resume.py, on PostgreSQL (see suite.py)."""

import pytest

from tests.marketplace.chat import test_chat_resume as unit_tests
from tests.marketplace.suite import rerun_on_postgres

globals().update(rerun_on_postgres(unit_tests))


@pytest.fixture
def database_url(postgres_database_url: str) -> str:
    return postgres_database_url
