"""Redis stopped or silent mid-run: every call ends within its deadline, limits fall back as configured."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from gateway.tenancy.errors import LimiterUnavailable
from gateway.tenancy.limits.demand import demand_for
from gateway.tenancy.limits.limiter import Limiter
from gateway.tenancy.limits.local import LocalLimits
from gateway.tenancy.limits.model import RateLimited
from gateway.tenancy.limits.redis_limits import RedisLimits
from gateway.tenancy.limits.resp import RedisClient
from gateway.tenancy.model import Limits

DEADLINE = 10.0  # a bound on every wait, far above the 0.2 s call timeout: failing, never hanging


def limiter_on(url: str, **options) -> Limiter:
    return Limiter(local=LocalLimits(), redis=RedisLimits(RedisClient(url, timeout=0.2)), probe_seconds=0.05,
                   **options)


def wanted(limits: Limits):
    return demand_for(key_id="key_a", limits=limits, prompt_tokens=10, max_tokens=10)


async def until(condition) -> None:
    async with asyncio.timeout(DEADLINE):
        while not condition():
            await asyncio.sleep(0.01)


async def test_redis_stopped_mid_run_falls_back_to_local_limits_and_comes_back(stoppable_redis):
    limiter = limiter_on(stoppable_redis.url)
    limits = Limits(rpm=3)
    assert (await limiter.admit(wanted(limits))).backend == "redis"
    stoppable_redis.stop()
    async with asyncio.timeout(DEADLINE):
        fallback = await limiter.admit(wanted(limits))
    assert fallback.backend == "local"
    assert limiter.status()["redis"] == "down" and limiter.status()["enforcing"] == "per replica"
    # The replica still enforces the limit alone meanwhile: 3 a minute, counted locally.
    await limiter.admit(wanted(limits))
    await limiter.admit(wanted(limits))
    with pytest.raises(RateLimited):
        await limiter.admit(wanted(limits))
    stoppable_redis.start_again()
    await until(lambda: not limiter.redis_down)
    assert (await limiter.admit(wanted(limits))).backend == "redis"
    assert limiter.status()["enforcing"] == "across replicas"
    await limiter.close()


async def test_closed_mode_refuses_limited_keys_while_redis_is_down_and_serves_the_others(stoppable_redis):
    limiter = limiter_on(stoppable_redis.url, when_down="closed")
    stoppable_redis.stop()
    with pytest.raises(LimiterUnavailable):
        async with asyncio.timeout(DEADLINE):
            await limiter.admit(wanted(Limits(rpm=3)))
    assert (await limiter.admit(wanted(Limits()))).backend == "none"  # a key without limits never needs Redis
    await limiter.close()


async def test_a_reservation_settled_while_redis_is_down_is_counted_as_lost_not_waited_on(stoppable_redis):
    limiter = limiter_on(stoppable_redis.url)
    reservation = await limiter.admit(wanted(Limits(max_concurrency=2)))
    stoppable_redis.stop()
    async with asyncio.timeout(DEADLINE):
        limiter.settle(reservation, 5)
        assert await limiter.extend(await limiter.admit(wanted(Limits(budget_tokens=100, budget_period="day"))),
                                    10) == 10  # the fallback's reservation extends locally
    assert limiter.status()["lost_settlements"] == 1
    await limiter.close()


async def test_the_fallback_continues_a_budget_from_what_redis_last_said(stoppable_redis):
    limiter = limiter_on(stoppable_redis.url)
    limits = Limits(budget_tokens=100, budget_period="total")
    assert (await limiter.admit(wanted(limits))).granted == 20
    assert (await limiter.admit(wanted(limits))).granted == 20
    stoppable_redis.stop()
    granted = []
    with contextlib.suppress(RateLimited):
        for _ in range(10):
            granted.append((await limiter.admit(wanted(limits))).granted)
    assert sum(granted) == 60  # 100 - 40 already spent, not a fresh 100
    await limiter.close()


@contextlib.asynccontextmanager
async def silent_server():
    """A TCP server that accepts connections and reads, but never answers (a hung Redis)."""
    connections = []

    async def swallow(reader, writer):
        connections.append(writer)
        while await reader.read(65536):
            pass

    server = await asyncio.start_server(swallow, "127.0.0.1", 0)
    try:
        yield f"redis://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        for writer in connections:
            writer.close()
        server.close()


async def test_a_redis_that_never_answers_costs_each_caller_at_most_one_timeout():
    async with silent_server() as url:
        limiter = limiter_on(url)
        async with asyncio.timeout(DEADLINE):
            first = await asyncio.gather(*(limiter.admit(wanted(Limits(rpm=100))) for _ in range(20)))
        assert {reservation.backend for reservation in first} == {"local"}
        assert limiter.redis_down
        await limiter.close()
