"""One process hammering one key's limits on Redis: what a gateway replica's limiter would do under load.

    python -m bench.limits_worker REDIS_URL '{"rpm": 50}' --tasks 16 --requests 40 --prompt 10 --max-tokens 20 \
        [--settle-used N] [--end-user LABEL] [--wait-for-go]

Its own Redis client and limiter, ``--tasks`` coroutines each asking ``--requests`` times
(admit, then settle with ``--settle-used`` tokens if given), for the end user ``--end-user``
(its label) if given. With ``--wait-for-go`` it prints ``ready`` once connected and starts
when a line arrives on its standard input, so several processes begin together. Prints one
JSON line: admitted, refused (by reason and by scope), the tokens granted and settled, and the
CPU seconds the process spent inside the limiter calls' loop.
Used by tests/gateway/tenancy/test_across_processes.py and bench/limits.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys

from gateway.tenancy.limits.demand import demand_for
from gateway.tenancy.limits.limiter import Limiter
from gateway.tenancy.limits.local import LocalLimits
from gateway.tenancy.limits.model import RateLimited
from gateway.tenancy.limits.redis_limits import RedisLimits
from gateway.tenancy.limits.resp import RedisClient
from gateway.tenancy.model import Limits


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def hammer(url: str, limits: Limits, *, tasks: int, requests: int, prompt: int, max_tokens: int,
                 settle_used: int | None, key: str, wait_for_go: bool = False, end_user: str | None = None) -> dict:
    limiter = Limiter(local=LocalLimits(), redis=RedisLimits(RedisClient(url, timeout=5.0)))
    wanted = demand_for(key_id=key, limits=limits, end_user=end_user, prompt_tokens=prompt, max_tokens=max_tokens)
    counts = {"admitted": 0, "refused": 0, "granted": 0, "settled": 0, "reasons": {}, "scopes": {}}
    await limiter.redis.client.call(b"PING")  # type: ignore[union-attr]  # connected before the clock starts

    async def one_task() -> None:
        for _ in range(requests):
            try:
                reservation = await limiter.admit(wanted)
            except RateLimited as refused:
                counts["refused"] += 1
                counts["reasons"][refused.reason] = counts["reasons"].get(refused.reason, 0) + 1
                counts["scopes"][refused.scope] = counts["scopes"].get(refused.scope, 0) + 1
                continue
            counts["admitted"] += 1
            counts["granted"] += reservation.granted
            if settle_used is not None:
                limiter.settle(reservation, settle_used)
                counts["settled"] += settle_used

    if wait_for_go:
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
    began = cpu_seconds()
    await asyncio.gather(*(one_task() for _ in range(tasks)))
    counts["cpu_seconds"] = cpu_seconds() - began
    counts["down"] = limiter.redis_down
    await limiter.close()
    return counts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("limits")
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--requests", type=int, default=10)
    parser.add_argument("--prompt", type=int, default=10)
    parser.add_argument("--max-tokens", type=int, default=20)
    parser.add_argument("--settle-used", type=int, default=None)
    parser.add_argument("--key", default="key_bench")
    parser.add_argument("--end-user", default=None)
    parser.add_argument("--wait-for-go", action="store_true")
    args = parser.parse_args()
    result = asyncio.run(hammer(args.url, Limits.model_validate_json(args.limits), tasks=args.tasks,
                                requests=args.requests, prompt=args.prompt, max_tokens=args.max_tokens,
                                settle_used=args.settle_used, key=args.key, wait_for_go=args.wait_for_go,
                                end_user=args.end_user))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
