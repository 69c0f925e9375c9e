"""Profile the gateway under one benchmark load with py-spy: where does its CPU go?

    python -m bench.profile [--variant off] [--stream] [--concurrency 32] [--seconds 8] [--baseline-tree DIR]

Starts the fake upstream and one gateway (pinned as in bench.run), drives the load for a
few seconds while ``py-spy record`` samples the gateway (``--baseline-tree DIR``: the
gateway of that checkout instead, to compare two profiles), then prints the functions with the
most samples (own time and inclusive time) and keeps the collapsed stacks (flame-graph
input) in bench/results/tmp/. Needs ``py-spy`` (pip install py-spy).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

import bench.contenders
from bench.contenders import AUTH_HEADERS, BASELINE, FAKE_MODEL, VARIANTS, start_gateway
from bench.loadgen import Scenario, run_load
from bench.machine import REPO_ROOT
from bench.procs import Pinning, boost_priority, raise_fd_limit, start_fake_upstream, stop_server

OUT_DIR = Path(__file__).resolve().parent / "results" / "tmp"


def top_functions(collapsed: str, *, limit: int = 25) -> tuple[list, list, int]:
    """(own-time top, inclusive top, total samples) from py-spy's collapsed stacks."""
    own, inclusive, total = Counter(), Counter(), 0
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        samples = int(count)
        total += samples
        frames = stack.split(";")
        own[frames[-1]] += samples
        for frame in set(frames):
            inclusive[frame] += samples
    return own.most_common(limit), inclusive.most_common(limit), total


async def profile(args: argparse.Namespace, tmp: Path) -> Path:
    pinning = Pinning.choose(True)
    pinning.pin_self()
    upstream = await start_fake_upstream(log_dir=tmp, cores=pinning.load_cores)
    variant = args.variant + BASELINE if args.baseline_tree is not None else args.variant
    gateway = await start_gateway(variant, upstream_url=upstream.base_url, tmp=tmp,
                                  log_dir=tmp, cores=pinning.server_cores, postgres_dsn=args.dsn)
    scenario = Scenario(stream=args.stream, concurrency=args.concurrency,
                        max_tokens=256 if args.stream else 16)
    output = OUT_DIR / f"profile-{variant}-{scenario.key}.txt"
    try:
        await run_load(base_url=gateway.base_url, model=FAKE_MODEL, scenario=scenario,
                       duration=1.0, warmup=0, headers=AUTH_HEADERS)
        spy = await asyncio.create_subprocess_exec(
            args.py_spy, "record", "--pid", str(gateway.pid), "--duration", str(args.seconds),
            "--rate", "250", "--format", "raw", "--output", str(output), "--nonblocking",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
        result = await run_load(base_url=gateway.base_url, model=FAKE_MODEL, scenario=scenario,
                                duration=args.seconds + 1, warmup=0, headers=AUTH_HEADERS)
        await spy.wait()
        print(f"load while profiling: {result.rps:.0f} req/s, p50 {result.latency_p50_ms:.2f} ms,"
              f" errors {result.errors}")
    finally:
        await stop_server(gateway)
        await stop_server(upstream)
    return output


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", default="off", choices=VARIANTS)
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--dsn", help="SESSIONS_DATABASE_URL for the postgres variant")
    parser.add_argument("--py-spy", default=shutil.which("py-spy")
                        or str(Path(sys.executable).with_name("py-spy")))
    parser.add_argument("--baseline-tree", type=Path, help="profile the gateway of this checkout instead")
    args = parser.parse_args(argv)
    if args.baseline_tree is not None:
        bench.contenders.BASELINE_TREE = args.baseline_tree.resolve()
    raise_fd_limit()
    boost_priority(-10)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    import os

    os.chdir(REPO_ROOT)
    import uvloop

    with tempfile.TemporaryDirectory(prefix="bench-profile-") as tmp:
        output = uvloop.run(profile(args, Path(tmp)))
    own, inclusive, total = top_functions(output.read_text())
    print(f"{total} samples; collapsed stacks in {output}")
    print("\nown time:")
    for frame, samples in own:
        print(f"  {100 * samples / total:5.1f}%  {frame}")
    print("\ninclusive:")
    for frame, samples in inclusive:
        print(f"  {100 * samples / total:5.1f}%  {frame}")


if __name__ == "__main__":
    main()
