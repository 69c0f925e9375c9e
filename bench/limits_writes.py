"""Writes to Redis (system calls) per request on the limits path, and its CPU, in process.

    .venvs/gateway/bin/python -m bench.limits_writes

``Meter.admit`` + ``settle_call`` of a limited key (rpm, tpm, concurrency, a daily budget) on a
throw-away ``redis-server``, 16 requests at once, 4,000 requests per run: the commands of one
turn of the event loop written together (``tenancy/limits/resp.py``, this tree) against each
written at once (the client as it was), alternated twice. The write count is exact; the CPU per
request (``time.process_time``) moves with the machine's load.
"""

from __future__ import annotations

import asyncio
import time

import orjson

from bench.limits import start_redis
from gateway.http.auth import Principal
from gateway.http.context import RequestContext
from gateway.relay.metering import Meter, settle_call
from gateway.tenancy.limits.limiter import Limiter
from gateway.tenancy.limits.local import LocalLimits
from gateway.tenancy.limits.redis_limits import RedisLimits
from gateway.tenancy.limits.resp import RedisClient
from gateway.tenancy.model import Limits

BODY = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16})
PAYLOAD = orjson.loads(BODY)
USAGE = {"prompt_tokens": 10, "completion_tokens": 16, "total_tokens": 26}
LIMITS = Limits(rpm=10**9, tpm=10**12, max_concurrency=10**6, budget_tokens=10**12, budget_period="day")
REQUESTS, CONCURRENCY = 4000, 16


class Ledger:
    def record(self, **_: object) -> None:
        pass


async def measure(gathered: bool) -> tuple[float, float]:
    """(writes per request, CPU µs per request)."""
    redis, url, _ = start_redis()
    try:
        limiter = Limiter(local=LocalLimits(), redis=RedisLimits(RedisClient(url, timeout=5.0)))
        meter = Meter(limiter, Ledger())
        principal = Principal(key_id="key_on", role="app", limits=LIMITS)

        async def run(count: int) -> None:
            for _ in range(count):
                request = RequestContext("r", principal=principal)
                request.keep_parsed(BODY, PAYLOAD)
                await meter.admit(request, "/v1/chat/completions", BODY, stream=False, queues=True)
                await asyncio.sleep(0)  # (the engine's answer)
                await settle_call(request, USAGE, model="m")

        await run(100)  # warm: the connection, the scripts
        protocol = limiter.redis.client._protocol
        if not gathered:  # each command written at once, as the client did before
            protocol.write_soon = lambda command: protocol.transport.write(command)
        writes = [0]
        write = protocol.transport.write

        def counting(data: bytes) -> None:
            writes[0] += 1
            write(data)

        protocol.transport.write = counting
        began = time.process_time()
        await asyncio.gather(*(run(REQUESTS // CONCURRENCY) for _ in range(CONCURRENCY)))
        cpu = (time.process_time() - began) / REQUESTS * 1e6
        await limiter.close()
        return writes[0] / REQUESTS, cpu
    finally:
        redis.terminate()


def main() -> None:
    for gathered in (False, True, False, True):
        writes, cpu = asyncio.run(measure(gathered))
        print(f"{'gathered' if gathered else 'at once'}: {writes:.2f} writes/request, {cpu:.0f} µs CPU/request")


if __name__ == "__main__":
    main()
