"""Test infrastructure shared by every test; fixtures of one package live in its folder's conftest.

The tests mirror the code: tests/gateway/<package>/ for each gateway package, tests/bench/,
tests/launcher/, tests/docs/ (the docs say what is true), tests/architecture/, one folder per
feature (tests/playground/, ...); helpers and fixture plugins live in one package,
tests/support/. A package's fast and integration tests sit side by side: the tier is a marker,
not a folder (``SERVICE_FIXTURES`` below).

Fixtures that start real services (plugins in tests/support/): ``vllm_engine`` /
``idle_vllm_engine`` (a real vLLM engine, ``engine.py``), ``killable_vllm_engine`` (the same
engine, which a test may kill, freeze and restart), ``vllm_fleet`` (two real engines,
``fleet.py``), ``postgres_server`` /
``postgres_dsn`` / ``postgres_database_url`` (a real PostgreSQL, ``postgres.py``), ``stoppable_postgres``
(a cluster of the test's own that it may stop and start), ``redis_server`` / ``redis_url`` /
``stoppable_redis`` (a real Redis, ``redis.py``), ``browser``
(a real headless Chromium, ``browser.py``), ``prometheus`` (a real Prometheus server of the test's
own, ``prometheus.py``; ``promtool`` there too), and ``tests.support.servers.run_uvicorn`` (an app
under real uvicorn). ``fake_engine`` (below) is the fake OpenAI upstream of the fast tests.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from hypothesis import settings

from tests.support.fake_engine import FakeEngine, running_fake_engine

# Property tests draw the same examples on every run (no seed that changes) and have no time
# limit per example: on a loaded 2-core machine hypothesis's default 200 ms deadline failed
# examples that were right, only slow.
settings.register_profile("suite", derandomize=True, deadline=None, database=None)
settings.load_profile("suite")

pytest_plugins = [
    "tests.support.servers",  # first: the others import it
    "tests.support.engine",
    "tests.support.fleet",
    "tests.support.postgres",
    "tests.support.redis",
    "tests.support.browser",
    "tests.support.prometheus",
    "tests.support.figures",
    "tests.support.full_disk",
]

# A test that uses one of these fixtures needs a real service, so it belongs to the
# integration tier whatever its markers say: `pytest -m "not integration"` stays fast.
SERVICE_FIXTURES = {
    "vllm_engine": "engine",
    "idle_vllm_engine": "engine",
    "vllm_fleet": "engine",
    "killable_vllm_engine": "engine",
    "launched_vllm_engine": "engine",
    "postgres_server": "postgres",
    "postgres_dsn": "postgres",
    "postgres_database_url": "postgres",
    "stoppable_postgres": "postgres",
    "redis_server": "redis",
    "redis_url": "redis",
    "stoppable_redis": "redis",
    "browser": "browser",
    "prometheus": "prometheus",
}


# Each test's timeout (pytest-timeout), its fixtures' set-up included: a hang fails the test
# and the run goes on (docs/testing.md#timeouts-a-test-fails-it-never-hangs). A slower test
# says so with @pytest.mark.timeout(N); --timeout=N replaces both defaults for a run.
UNIT_TIMEOUT = 120.0
INTEGRATION_TIMEOUT = 900.0  # the first engine test starts the engine (250 s seen on a loaded machine)


@pytest.hookimpl(tryfirst=True)  # before -m deselects anything
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    chosen_timeout = config.getoption("timeout", None) is not None
    for item in items:
        services = {SERVICE_FIXTURES[name] for name in getattr(item, "fixturenames", ()) if name in SERVICE_FIXTURES}
        if services and item.get_closest_marker("integration") is None:
            item.add_marker(pytest.mark.integration)
        for service in services:
            if item.get_closest_marker(service) is None:
                item.add_marker(getattr(pytest.mark, service))
        if not chosen_timeout and item.get_closest_marker("timeout") is None:
            integration = item.get_closest_marker("integration") is not None
            item.add_marker(pytest.mark.timeout(INTEGRATION_TIMEOUT if integration else UNIT_TIMEOUT))


@pytest.fixture
async def fake_engine() -> AsyncIterator[FakeEngine]:
    """The fake OpenAI upstream (tests/support/fake_engine.py), for fast unit tests."""
    async with running_fake_engine() as engine:
        yield engine
