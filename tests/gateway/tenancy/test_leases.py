"""A request holds its ``max_concurrency`` slot as a lease, renewed while it is in flight.

The lease (``LIMIT_LEASE_SECONDS``, 300 s by default) frees the slots of a replica that died
mid-request; a request longer than it must keep its slot. The limiter renewed a lease only when a
stream outgrew its reservation, so a long stream its reservation covered lost its slot after one
lease, and ``max_concurrency`` let a second request in beside it.
"""

from __future__ import annotations

import gc

import pytest

from gateway.tenancy.limits.demand import demand_for
from gateway.tenancy.limits.limiter import Limiter
from gateway.tenancy.limits.local import LocalLimits
from gateway.tenancy.limits.model import RateLimited
from gateway.tenancy.limits.redis_limits import RedisLimits
from gateway.tenancy.limits.resp import RedisClient
from gateway.tenancy.model import Limits
from tests.support.waiting import until

ONE_AT_A_TIME = Limits(max_concurrency=1)


def demand(key: str = "key_a", limits: Limits = ONE_AT_A_TIME):
    return demand_for(key_id=key, limits=limits, prompt_tokens=10, max_tokens=20)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def limiter(clock):
    """A limiter in process with a 30 s lease, on ``clock``."""
    limiter = Limiter(local=LocalLimits(lease_seconds=30, clock=clock))
    yield limiter
    await limiter.close()


async def test_a_request_longer_than_its_lease_keeps_its_slot_while_renewed(limiter, clock):
    first = await limiter.admit(demand())
    clock.now += 25
    assert limiter.renew_leases() == 1
    clock.now += 25  # 50 s after its admission: past its first lease, within the renewed one
    with pytest.raises(RateLimited) as refused:
        await limiter.admit(demand())
    assert refused.value.reason == "max_concurrency"
    limiter.settle(first, 5)
    assert limiter.renew_leases() == 0  # (settled: nothing left to renew)
    await limiter.admit(demand())  # its slot is free at once


async def test_without_a_renewal_the_lease_runs_out_as_before(limiter, clock):
    """What the renewal is for (and what still frees a dead replica's slots): a lease nobody renews ends."""
    await limiter.admit(demand())
    clock.now += 31
    await limiter.admit(demand())


async def test_a_reservation_its_request_dropped_without_settling_is_not_renewed(limiter, clock):
    await limiter.admit(demand())  # (nothing keeps it: as a request whose task died before settling)
    gc.collect()
    assert limiter.renew_leases() == 0
    clock.now += 31
    await limiter.admit(demand())  # its lease ran out, as before


async def test_only_requests_holding_a_slot_are_renewed(limiter):
    held = await limiter.admit(demand())
    unheld = await limiter.admit(demand("key_b", Limits(rpm=100)))
    assert limiter.renew_leases() == 1
    assert held.demand.leases and not unheld.demand.leases


async def test_the_limiter_renews_by_itself_every_third_of_a_lease():
    limiter = Limiter(local=LocalLimits(lease_seconds=0.3))
    try:
        first = await limiter.admit(demand())
        leases = limiter.local._scopes["key:key_a"].leases
        admitted_until = leases[first.id]
        await until(lambda: leases[first.id] > admitted_until, 10, what="the lease renewed by the limiter's task")
    finally:
        await limiter.close()


@pytest.mark.integration
@pytest.mark.redis
async def test_on_redis_a_renewal_pushes_the_leases_deadline(redis_url):
    limiter = Limiter(local=LocalLimits(), redis=RedisLimits(RedisClient(redis_url, timeout=2.0), lease_seconds=30))
    client = limiter.redis.client
    try:
        await client.call(b"FLUSHALL")
        first = await limiter.admit(demand("key_lease"))
        key = b"gw:{key_lease}:key:key_lease:conc"
        admitted_until = float(await client.call(b"ZSCORE", key, first.id.encode()))
        assert limiter.renew_leases() == 1
        renewed_until = float(await client.call(b"ZSCORE", key, first.id.encode()))  # (after it: one connection)
        assert renewed_until > admitted_until
        limiter.settle(first, 5)
        assert await client.call(b"ZSCORE", key, first.id.encode()) is None  # settled: the lease is gone
        assert limiter.renew_leases() == 0
    finally:
        await limiter.close()
