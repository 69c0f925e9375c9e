"""Limits hold exactly when separate processes (replicas) hammer one key on a real Redis at once."""

from __future__ import annotations

import json
import subprocess
import sys

from gateway.tenancy.limits.resp import RedisClient

WORKER_TIMEOUT = 120


def hammer_together(url: str, limits: dict, *, processes: int = 2, **options) -> list[dict]:
    """Start ``processes`` workers, let them connect, start them together, and collect their counts."""
    argv = [sys.executable, "-m", "bench.limits_worker", url, json.dumps(limits), "--wait-for-go"]
    for name, value in options.items():
        argv += [f"--{name.replace('_', '-')}", str(value)]
    workers = [subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
               for _ in range(processes)]
    try:
        for worker in workers:
            assert worker.stdout.readline().strip() == "ready"
        for worker in workers:
            worker.stdin.write("go\n")
            worker.stdin.flush()
        results = []
        for worker in workers:
            output, _ = worker.communicate(timeout=WORKER_TIMEOUT)
            assert worker.returncode == 0
            results.append(json.loads(output))
        return results
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()


def test_rpm_200_gives_exactly_200_successes_across_two_processes(redis_url):
    # 320 asks for 200 slots: either process alone asks only 160, so both must have been admitted.
    results = hammer_together(redis_url, {"rpm": 200}, tasks=16, requests=10)
    assert sum(result["admitted"] for result in results) == 200
    assert sum(result["refused"] for result in results) == 120
    assert all(result["admitted"] >= 40 for result in results)


def test_tpm_is_never_exceeded_and_every_grant_is_whole(redis_url):
    results = hammer_together(redis_url, {"tpm": 1000}, tasks=16, requests=10, prompt=7, max_tokens=23)
    granted = sum(result["granted"] for result in results)
    assert granted == 30 * sum(result["admitted"] for result in results)
    assert granted == 990  # 33 whole demands of 30 fit in 1000, not one more


async def test_a_budget_is_never_overspent_and_its_counter_is_what_was_granted(redis_url):
    results = hammer_together(redis_url, {"budget_tokens": 5000, "budget_period": "day"}, tasks=16, requests=10,
                              prompt=50, max_tokens=100)
    granted = sum(result["granted"] for result in results)
    # 33 whole demands of 150 take 4950; the 50 left are less than a prompt of 50 plus one token.
    assert granted == 4950
    client = RedisClient(redis_url)
    keys = await client.call(b"KEYS", b"gw:{key_bench}:key:key_bench:budget:*")
    assert len(keys) == 1 and int(await client.call(b"GET", keys[0])) == 4950
    await client.close()


async def test_settled_usage_replaces_the_reservations_across_processes(redis_url):
    results = hammer_together(redis_url, {"tpm": 100000, "max_concurrency": 4}, tasks=4, requests=25, prompt=10,
                              max_tokens=90, settle_used=37)
    admitted = sum(result["admitted"] for result in results)
    assert admitted + sum(result["refused"] for result in results) == 200
    client = RedisClient(redis_url)
    buckets = await client.call(b"HVALS", b"gw:{key_bench}:key:key_bench:tpm")
    assert sum(int(value) for value in buckets) == 37 * admitted  # every reservation settled to its usage
    assert await client.call(b"ZCARD", b"gw:{key_bench}:key:key_bench:conc") == 0  # every lease released
    await client.close()


def test_an_end_users_rpm_holds_exactly_across_two_processes_within_the_keys(redis_url):
    # The key allows 300 a minute, each end user 50: 320 asks of one end user get exactly its 50.
    limits = {"rpm": 300, "end_user": {"rpm": 50}}
    results = hammer_together(redis_url, limits, tasks=16, requests=10, end_user="0123456789abcdef")
    assert sum(result["admitted"] for result in results) == 50
    assert sum(result["refused"] for result in results) == 270
    assert all(set(result["scopes"]) <= {"user:key_bench:0123456789abcdef"} for result in results)
