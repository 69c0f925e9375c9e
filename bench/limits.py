"""The limiter's cost and exactness: CPU per check-and-reserve on Redis against limits off, and over-admission.

    .venvs/gateway/bin/python -m bench.limits [--requests 20000] [--rounds 5] [--out bench/results/limits]

1. **CPU per request** in one process, in rounds that alternate the variants (the machine is
   shared and noisy: ratios within one run, not absolute times across runs): ``off`` (a key
   without limits: ``admit`` + ``settle`` cost no I/O), ``local`` (limits in process),
   ``redis`` (limits on a real Redis: one script call to admit, one to settle). Each request
   is admit then settle, from 32 concurrent tasks (as in a gateway with requests in flight)
   and from 1. The figure is the process's CPU time per request (user + system), which is
   what the limiter adds to the gateway's own CPU; Redis's own CPU is another process's.
2. **Over-admission**: 4 processes (as 4 replicas) hammer one key at once, for each limit
   kind; the count admitted against the limit (target: 0 over).

A throw-away ``redis-server --save ''`` on a free port is started and stopped here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.limits_worker import cpu_seconds
from bench.procs import free_port
from gateway.tenancy.limits.demand import demand_for
from gateway.tenancy.limits.limiter import Limiter
from gateway.tenancy.limits.local import LocalLimits
from gateway.tenancy.limits.redis_limits import RedisLimits
from gateway.tenancy.limits.resp import RedisClient
from gateway.tenancy.model import Limits

LIMITED = Limits(rpm=10**9, tpm=10**12, max_concurrency=10**6, budget_tokens=10**12, budget_period="day")
OVER_ADMISSION_CASES = [
    ("rpm 200", {"rpm": 200}, "admitted", 200),
    ("tpm 6000 (demands of 30)", {"tpm": 6000}, "granted", 6000),
    ("budget 20000/day (demands of 150)", {"budget_tokens": 20000, "budget_period": "day"}, "granted", 20000),
]


def start_redis() -> tuple[subprocess.Popen, str, Path]:
    root = Path(tempfile.mkdtemp(prefix="bench-redis-"))
    port = free_port()
    process = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                "--appendonly", "no", "--dir", str(root)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 15
    while subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True).stdout.strip() != b"PONG":
        if time.monotonic() > deadline or process.poll() is not None:
            raise RuntimeError("redis-server did not start")
        time.sleep(0.05)
    return process, f"redis://127.0.0.1:{port}", root


async def cpu_per_request(limiter: Limiter, limits: Limits, *, requests: int, concurrency: int) -> float:
    wanted = demand_for(key_id="key_cpu", limits=limits, prompt_tokens=100, max_tokens=200)

    async def task(count: int) -> None:
        for _ in range(count):
            reservation = await limiter.admit(wanted)
            limiter.settle(reservation, 250)

    await task(200)  # warm: the connection, the script loaded
    began = cpu_seconds()
    await asyncio.gather(*(task(requests // concurrency) for _ in range(concurrency)))
    return (cpu_seconds() - began) / (requests // concurrency * concurrency) * 1e6


async def measure_cpu(url: str, *, requests: int, rounds: int) -> dict:
    redis = Limiter(local=LocalLimits(), redis=RedisLimits(RedisClient(url, timeout=5.0)))
    local = Limiter(local=LocalLimits())
    variants = {"off": (redis, Limits()), "local": (local, LIMITED), "redis": (redis, LIMITED)}
    results: dict = {}
    for concurrency in (32, 1):
        samples: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(rounds):
            for name, (limiter, limits) in variants.items():
                samples[name].append(await cpu_per_request(limiter, limits, requests=requests,
                                                           concurrency=concurrency))
        results[f"c{concurrency}"] = {name: {"median_us": statistics.median(values),
                                             "samples_us": [round(value, 2) for value in values]}
                                      for name, values in samples.items()}
    await redis.close()
    return results


def over_admission(url: str, processes: int = 4) -> list[dict]:
    rows = []
    for index, (name, limits, counted, limit) in enumerate(OVER_ADMISSION_CASES):
        argv = [sys.executable, "-m", "bench.limits_worker", url, json.dumps(limits), "--wait-for-go",
                "--tasks", "16", "--requests", "25", "--prompt", "50" if "budget" in name else "7",
                "--max-tokens", "100" if "budget" in name else "23", "--key", f"key_over{index}"]
        workers = [subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                   for _ in range(processes)]
        for worker in workers:
            assert worker.stdout.readline().strip() == "ready"
        for worker in workers:
            worker.stdin.write("go\n")
            worker.stdin.flush()
        results = [json.loads(worker.communicate(timeout=300)[0]) for worker in workers]
        total = sum(result[counted] for result in results)
        rows.append({"case": name, "processes": processes, "asked": processes * 16 * 25,
                     "admitted": sum(result["admitted"] for result in results), "counted": counted,
                     "total": total, "limit": limit, "over": max(0, total - limit),
                     "per_process_admitted": [result["admitted"] for result in results]})
    return rows


def report(cpu: dict, over: list[dict]) -> str:
    lines = ["| concurrency | limits off | in process | Redis | Redis − off |", "|---|---|---|---|---|"]
    for concurrency, variants in cpu.items():
        off, local, redis = (variants[name]["median_us"] for name in ("off", "local", "redis"))
        lines.append(f"| {concurrency} | {off:.1f} µs | {local:.1f} µs | {redis:.1f} µs | +{redis - off:.1f} µs |")
    lines += ["", "| case | processes | asked | admitted | counted | limit | over |", "|---|---|---|---|---|---|---|"]
    for row in over:
        lines.append(f"| {row['case']} | {row['processes']} | {row['asked']} | {row['admitted']} | "
                     f"{row['total']} {row['counted']} | {row['limit']} | {row['over']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default="bench/results/limits")
    args = parser.parse_args()
    if shutil.which("redis-server") is None:
        sys.exit("redis-server not found: scripts/install_redis.sh")
    process, url, root = start_redis()
    try:
        import uvloop

        cpu = uvloop.run(measure_cpu(url, requests=args.requests, rounds=args.rounds))
        over = over_admission(url)
    finally:
        process.kill()
        process.wait()
        shutil.rmtree(root, ignore_errors=True)
    text = report(cpu, over)
    print(text)
    Path(args.out + ".json").write_text(json.dumps({"cpu": cpu, "over_admission": over}, indent=2) + "\n")
    Path(args.out + ".md").write_text(text)


if __name__ == "__main__":
    main()
