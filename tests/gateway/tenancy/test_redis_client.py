"""The limiter's Redis client on a real Redis: the commands of one turn of the loop go in one write, in order;
a server that lost the scripts gets them again."""

from __future__ import annotations

import asyncio

import pytest

from gateway.tenancy.limits.demand import demand_for
from gateway.tenancy.limits.limiter import Limiter
from gateway.tenancy.limits.local import LocalLimits
from gateway.tenancy.limits.redis_limits import RedisLimits
from gateway.tenancy.limits.resp import RedisClient, pack
from gateway.tenancy.model import Limits

pytestmark = [pytest.mark.integration, pytest.mark.redis]


async def test_the_commands_of_one_turn_of_the_loop_go_in_one_write_and_are_answered_in_order(redis_url):
    client = RedisClient(redis_url, timeout=5.0)
    try:
        await client.call(b"DEL", b"gw-test:n")
        protocol = client._protocol
        writes: list[bytes] = []
        write = protocol.transport.write

        def counting(data: bytes) -> None:
            writes.append(data)
            write(data)

        protocol.transport.write = counting
        for _ in range(3):  # three settles' worth, in one turn of the loop
            client.send_nowait(pack((b"INCR", b"gw-test:n")))
        assert writes == []  # not yet: gathered until the turn ends
        assert await client.call(b"GET", b"gw-test:n") == b"3"  # written after them, answered after them
        assert len(writes) == 1
        replies = await asyncio.gather(*(client.call(b"INCR", b"gw-test:n") for _ in range(5)))
        assert replies == [4, 5, 6, 7, 8] and len(writes) == 2  # five awaited callers, one write

        client.send_nowait(pack((b"INCR", b"gw-test:n")))
        await asyncio.sleep(0)  # the end of this turn of the loop writes it alone
        assert len(writes) == 3
        assert await client.call(b"GET", b"gw-test:n") == b"9"
        assert client.failed_unawaited == 0
    finally:
        await client.close()


async def test_a_check_and_reserve_and_an_extend_reload_the_scripts_a_flushed_server_lost(redis_url):
    # The check-and-reserve awaits its reply's future itself (no coroutine of the client's): a server that
    # lost the scripts without a new connection (SCRIPT FLUSH) still admits, the script loaded again.
    client = RedisClient(redis_url, timeout=5.0)
    limiter = Limiter(local=LocalLimits(), redis=RedisLimits(client))
    try:
        await client.call(b"FLUSHDB")
        limits = Limits(rpm=5, budget_tokens=1000, budget_period="day")
        first = await limiter.admit(demand_for(key_id="key_flush", limits=limits, prompt_tokens=10, max_tokens=10))
        assert await client.call(b"SCRIPT", b"FLUSH") == b"OK"
        second = await limiter.admit(demand_for(key_id="key_flush", limits=limits, prompt_tokens=10, max_tokens=10))
        assert (first.backend, second.backend) == ("redis", "redis") and not limiter.redis_down
        assert second.rate.requests_remaining == 3 and second.rate.budget_remaining == 960
        assert await client.call(b"SCRIPT", b"FLUSH") == b"OK"
        assert await limiter.extend(second, 100) == 100  # (adjust.lua loaded again)
        assert not limiter.redis_down
    finally:
        await limiter.close()
