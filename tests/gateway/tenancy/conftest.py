"""Limiters of both kinds (in process, on a real Redis); the databases are tests/gateway/conftest.py's."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway.tenancy.limits.limiter import Limiter
from gateway.tenancy.limits.local import LocalLimits
from gateway.tenancy.limits.redis_limits import RedisLimits
from gateway.tenancy.limits.resp import RedisClient

BACKENDS = ["local", pytest.param("redis", marks=[pytest.mark.integration, pytest.mark.redis])]


@pytest.fixture(params=BACKENDS)
async def limiter(request) -> AsyncIterator[Limiter]:
    """A limiter in process, or one on the session's Redis (emptied for the test)."""
    if request.param == "local":
        limiter = Limiter(local=LocalLimits())
    else:
        url = request.getfixturevalue("redis_url")
        limiter = Limiter(local=LocalLimits(), redis=RedisLimits(RedisClient(url, timeout=2.0)))
    yield limiter
    await limiter.close()
