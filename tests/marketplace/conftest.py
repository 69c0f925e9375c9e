"""The marketplace tests' one hook: the two-database suite's sorting and check (``suite.py``)."""

from __future__ import annotations

import pytest

from tests.marketplace.suite import sort_items


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    sort_items(config, items)
