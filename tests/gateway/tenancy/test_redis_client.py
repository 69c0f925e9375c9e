"""The limiter's Redis client on a real Redis: the commands of one turn of the loop go in one write, in order."""

from __future__ import annotations

import asyncio

import pytest

from gateway.tenancy.limits.resp import RedisClient, pack

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
