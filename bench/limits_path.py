"""The limiter's cost on the whole request path: the gateway's CPU per request, a limited key against an unlimited one.

    .venvs/gateway/bin/python -m bench.limits_path [--requests 2000] [--rounds 5] [--concurrency 32]
                                                   [--baseline-tree DIR] [--no-pin] [--out bench/results/limits_path]

One gateway process (``python -m gateway``, SQLite, ``REDIS_URL`` on a throw-away
``redis-server``) in front of the fast fake engine (``bench.fake_upstream``). Two database
keys differ only in their limits: ``unlimited`` (no limits: admission costs one object, no
I/O, the ledger still records it) and ``limited`` (rpm, tpm, concurrency and a daily budget,
all far above the load, so nothing is refused: the cost of checking them on Redis, reserving,
counting a stream's reads and settling); a third, ``end_user``, has the same limits and the
same again for each end user, and its requests name one of ``END_USERS`` end users in OpenAI's
``user`` field (the cost of finding and labelling the end user and of its scope in the same
Redis script: compare it with ``limited``). The rounds alternate the keys, non-streamed and
streamed chat completions (16 tokens); the figure is the gateway process's CPU time (user +
system) per request over the round, median of the rounds. As in ``bench.run``, the gateway runs
pinned to one core, everything else to the other (``--no-pin``: not pinned, as before 2026-12-06),
and the load (aiohttp, 32 at once) keeps the gateway's core busy: a gateway that idles between
requests pays a wake-up for each, and a limited request's wait on Redis adds one, which is the
machine's cost of idling, not the limiter's (the first version, httpx at 16 at once, left the
gateway waiting for its load: +170 µs a limited request there, +35 µs saturated, docs/benchmarks.md).
The machine is shared: read the ratio within the run, not the absolute times.

``--baseline-tree DIR`` also starts the gateway of another checkout (a git worktree of an
earlier commit, run from its directory with this environment), on the same Redis and upstream
with its own database and keys, and alternates it with this tree's round by round: before and
after in one run. Its figures are reported under ``baseline``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import httpx
import orjson
import psutil

from bench.limits import start_redis
from bench.loadgen import new_session
from bench.procs import Pinning, free_port

ADMIN_KEY = "sk-bench-admin-0123456789abcdef"
LIMITS = {"rpm": 10**9, "tpm": 10**12, "max_concurrency": 10**6, "budget_tokens": 10**12, "budget_period": "day"}
MODEL = "fake-model"
END_USERS = 100  # distinct end users the end_user key's requests cycle through


def start(argv: list[str], env: dict | None = None, log: Path | None = None,
          cwd: Path | None = None, cores: frozenset[int] | None = None) -> subprocess.Popen:
    out = log.open("wb") if log is not None else subprocess.DEVNULL
    pin = (lambda: os.sched_setaffinity(0, cores)) if cores else None  # (before any of its threads exist)
    return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cwd,
                            preexec_fn=pin)


async def wait_ready(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient() as client:
        while True:
            try:
                if (await client.get(url)).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} not ready in {timeout}s")
            await asyncio.sleep(0.1)


async def one_round(session: aiohttp.ClientSession, base: str, gateway: psutil.Process, key: str, *,
                    stream: bool, requests: int, concurrency: int, end_users: bool = False) -> float:
    payload = {"model": MODEL, "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 16,
               "stream": stream}
    body = orjson.dumps(payload)
    headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
    url = base + "/v1/chat/completions"
    sent = iter(range(10**9))

    async def task(count: int) -> None:
        for _ in range(count):
            data = orjson.dumps(payload | {"user": f"user-{next(sent) % END_USERS}@example.com"}) if end_users else body
            async with session.post(url, data=data, headers=headers) as answer:
                text = await answer.read()
                assert answer.status == 200, text

    each = requests // concurrency
    before = gateway.cpu_times()
    await asyncio.gather(*(task(each) for _ in range(concurrency)))
    after = gateway.cpu_times()
    return (after.user + after.system - before.user - before.system) / (each * concurrency) * 1e6


async def run(args: argparse.Namespace) -> dict:
    # As bench.run: each gateway alone on one core; this load generator, Redis and the fake engine (started
    # from this process, so on its core) on the other, so a gateway's CPU time is not moved by competing with them.
    pinning = Pinning.choose(not args.no_pin)
    pinning.pin_self()
    redis, redis_url, redis_root = start_redis()
    root = Path(tempfile.mkdtemp(prefix="bench-limits-path-"))
    upstream_port = free_port()
    upstream = start([sys.executable, "-m", "bench.fake_upstream", "--port", str(upstream_port), "--model", MODEL])
    trees = {"this": None}
    if args.baseline_tree is not None:
        trees["baseline"] = args.baseline_tree.resolve()
    processes, bases = [upstream, redis], {}
    for name, tree in trees.items():
        port = free_port()
        (root / name).mkdir()
        env = os.environ | ({"PYTHONPATH": str(tree)} if tree is not None else {}) | {
                   "VLLM_BASE_URL": f"http://127.0.0.1:{upstream_port}", "PORT": str(port),
                            "HOST": "127.0.0.1", "ADMIN_API_KEYS": ADMIN_KEY, "REDIS_URL": redis_url,
                            "DATABASE_URL": f"sqlite+aiosqlite:///{root / name}/gateway.db", "SESSION_STORE": "off",
                            "ACCESS_LOG": "false", "ENGINE_POLL_INTERVAL": "60"}
        processes.insert(0, start([sys.executable, "-m", "gateway"], env, root / f"{name}.log", cwd=tree,
                                  cores=pinning.server_cores))
        bases[name] = (f"http://127.0.0.1:{port}", processes[0])
    clients: list[httpx.AsyncClient] = []
    sessions: list[aiohttp.ClientSession] = []
    try:
        gateways = {}
        for name, (base, gateway) in bases.items():
            await wait_ready(base + "/readyz")
            limits = httpx.Limits(max_connections=args.concurrency, max_keepalive_connections=args.concurrency)
            client = httpx.AsyncClient(base_url=base, limits=limits, timeout=60)
            clients.append(client)
            admin = {"authorization": f"Bearer {ADMIN_KEY}"}
            keys = {}
            for key_name, body in (("unlimited", {}), ("limited", {"limits": LIMITS}),
                                   ("end_user", {"limits": LIMITS | {"end_user": LIMITS}})):
                created = await client.post("/admin/keys", json={"name": key_name, **body}, headers=admin)
                created.raise_for_status()
                keys[key_name] = created.json()["key"]
            process = psutil.Process(gateway.pid)
            session = new_session(args.concurrency)
            sessions.append(session)
            for key_name, key in keys.items():  # warm: the key cache, the connections, the Lua scripts
                await one_round(session, base, process, key, stream=False, requests=400,
                                concurrency=args.concurrency, end_users=key_name == "end_user")
            gateways[name] = (session, base, process, keys)
        results: dict = {name: {} for name in gateways}
        for stream in (False, True):
            samples = {name: {key_name: [] for key_name in keys} for name, (_, _, _, keys) in gateways.items()}
            for _ in range(args.rounds):
                for name, (session, base, process, keys) in gateways.items():
                    for key_name, key in keys.items():
                        samples[name][key_name].append(await one_round(
                            session, base, process, key, stream=stream, requests=args.requests,
                            concurrency=args.concurrency, end_users=key_name == "end_user"))
            for name, by_key in samples.items():
                medians = {key_name: statistics.median(values) for key_name, values in by_key.items()}
                results[name]["streamed" if stream else "non-streamed"] = {
                    "median_us": medians, "samples_us": {key_name: [round(v, 1) for v in values]
                                                         for key_name, values in by_key.items()},
                    "added_us": medians["limited"] - medians["unlimited"],
                    "ratio": medians["limited"] / medians["unlimited"],
                    "end_user_added_us": medians["end_user"] - medians["limited"],
                    "end_user_ratio": medians["end_user"] / medians["limited"]}
        return {"requests": args.requests, "rounds": args.rounds, "concurrency": args.concurrency,
                "pinning": pinning.describe(),
                "load_average": os.getloadavg(), "baseline_tree": str(trees.get("baseline") or "") or None,
                "results": results["this"], **({"baseline": results["baseline"]} if "baseline" in results else {})}
    finally:
        for session in sessions:
            await session.close()
        for client in clients:
            await client.aclose()
        for process in processes:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(redis_root, ignore_errors=True)


def markdown(report: dict) -> str:
    lines = [f"Gateway CPU per request, median of {report['rounds']} rounds of {report['requests']} requests at "
             f"concurrency {report['concurrency']} (load average {report['load_average'][0]:.1f}; "
             f"{report.get('pinning', 'not pinned')}):", "",
             "| gateway | request | unlimited key | limited key (Redis) | added | ratio "
             "| + end-user limits | added | ratio |",
             "|---|---|---|---|---|---|---|---|---|"]
    for tree in ("results", "baseline"):
        for kind, figures in report.get(tree, {}).items():
            median = figures["median_us"]
            lines.append(f"| {'this tree' if tree == 'results' else 'baseline tree'} | {kind} | "
                         f"{median['unlimited']:.1f} µs | {median['limited']:.1f} µs | "
                         f"{figures['added_us']:+.1f} µs | {figures['ratio']:.3f}x | {median['end_user']:.1f} µs | "
                         f"{figures['end_user_added_us']:+.1f} µs | {figures['end_user_ratio']:.3f}x |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--baseline-tree", type=Path, default=None,
                        help="also measure the gateway of this checkout, round by round with this tree's")
    parser.add_argument("--no-pin", action="store_true", help="do not pin the gateways and the load to cores")
    parser.add_argument("--out", type=Path, default=Path("bench/results/limits_path"))
    args = parser.parse_args(argv)
    report = asyncio.run(run(args))
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=2))
    args.out.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))
    return report


if __name__ == "__main__":
    main()
