"""Instructions per request that limits add on the request path, counted by valgrind: no load moves them.

    .venvs/gateway/bin/python -m bench.limits_instructions [--requests 1000] [--baseline-tree DIR]

In process, as ``bench.limits_writes``: ``Meter.admit`` of a chat completion, a stream's 16
reads through ``metered_sink`` (streamed only), the rate-limit headers put on the request,
then ``settle_call`` with the engine's usage and the ledger's record (a real ``UsageLedger``,
never flushed), 16 requests at once on uvloop (as the gateway runs), against a throw-away
``redis-server``. Two database keys,
as ``bench.limits_path`` has them: ``unlimited`` (no limits: no I/O) and ``limited`` (rpm, tpm,
concurrency and a daily budget far above the load). Under ``valgrind --tool=callgrind`` (the
interpreter's user-space instructions; the kernel's side of the system calls is not counted),
one process runs 192 requests of each case (four: two keys, streamed or not), and one process
per case the same plus ``--requests`` more of that case; the difference divided by
``--requests`` is the instructions of one request, start-up and warm-up cancelled.

``--baseline-tree DIR`` runs the same in the gateway of another checkout: before and after.
What it leaves out, by design: the HTTP server and the relay (the same for both keys), and
the event loop's waits for Redis (``bench.limits_path`` measures the whole request).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

CHILD = Path(__file__).resolve()
WARM = 192  # (a multiple of CONCURRENCY)
CONCURRENCY = 16
EVENTS = 16


CASES = [(stream, key) for stream in (False, True) for key in ("unlimited", "limited")]


async def _child(url: str, extra: list[int]) -> None:
    """Runs in the tree under test (its ``gateway`` on PYTHONPATH); imports nothing of ``bench``."""
    import asyncio
    import gc

    import orjson

    from gateway.http.auth import Principal
    from gateway.http.context import RequestContext
    from gateway.relay.metering import Meter, metered_sink, settle_call
    from gateway.tenancy.limits.limiter import Limiter
    from gateway.tenancy.limits.local import LocalLimits
    from gateway.tenancy.limits.redis_limits import RedisLimits
    from gateway.tenancy.limits.resp import RedisClient
    from gateway.tenancy.model import Limits
    from gateway.tenancy.usage.ledger import UsageLedger

    usage = {"prompt_tokens": 10, "completion_tokens": 16, "total_tokens": 26}
    event = b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n'
    limits = Limits(rpm=10**9, tpm=10**12, max_concurrency=10**6, budget_tokens=10**12, budget_period="day")
    principals = {"limited": Principal(key_id="key_limited", role="app", limits=limits),
                  "unlimited": Principal(key_id="key_unlimited", role="app", limits=Limits())}
    limiter = Limiter(local=LocalLimits(), redis=RedisLimits(RedisClient(url, timeout=30.0)))
    meter = Meter(limiter, UsageLedger(None))  # type: ignore[arg-type]  # (record only: never flushed)

    class Sink:
        counts_events = True
        first_event = None

        async def write(self, block: bytes) -> None:
            pass

    async def run(count: int, key: str, stream: bool) -> None:
        body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hello there"}],
                             "max_tokens": 16, "stream": stream})
        payload = orjson.loads(body)
        principal = principals[key]
        for _ in range(count):
            request = RequestContext("r", principal=principal)
            request.keep_parsed(body, payload)
            await meter.admit(request, "/v1/chat/completions", body, stream=stream, queues=True)
            if stream:
                sink = metered_sink(Sink(), request)
                for _ in range(EVENTS):
                    await sink.write(event)
            else:
                await asyncio.sleep(0)  # (the engine's answer)
            await settle_call(request, usage, model="m")

    gc.collect()  # as the gateway does once started (gateway.serving.freeze_startup_heap): the collector
    gc.freeze()   # walks only what was allocated since, not every module's objects at each full collection
    for (stream, key), more in zip(CASES, extra, strict=True):
        await asyncio.gather(*(run((WARM + more) // CONCURRENCY, key, stream) for _ in range(CONCURRENCY)))
    await limiter.close()


def instructions(tree: Path, url: str, extra: list[int], out: Path) -> int:
    env = os.environ | {"PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
    dump = out / f"callgrind.{tree.name}.{'-'.join(map(str, extra))}"
    subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={dump}", sys.executable, str(CHILD),
                    "--child", url, *map(str, extra)],
                   env=env, cwd=tree, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for line in dump.read_text(errors="replace").splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise ValueError(f"no totals in {dump}")


def main(argv: list[str] | None = None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        import asyncio

        import uvloop
        uvloop.install()  # the gateway's loop (gateway.cli)
        asyncio.run(_child(argv[1], [int(n) for n in argv[2:]]))
        return {}
    from bench.limits import start_redis

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--baseline-tree", type=Path)
    parser.add_argument("--jobs", type=int, default=2, help="valgrind processes at once")
    parser.add_argument("--out", type=Path, default=Path("bench/results/limits_instructions"))
    args = parser.parse_args(argv)
    args.requests -= args.requests % CONCURRENCY
    trees = {"this": Path.cwd()} | ({"baseline": args.baseline_tree.resolve()} if args.baseline_tree else {})
    redis, url, redis_root = start_redis()
    report: dict = {"requests": args.requests, "concurrency": CONCURRENCY, "results": {}}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-limits-instr-") as tmp:
            runs = []  # (tree, case or None for the base, the process)
            with ThreadPoolExecutor(args.jobs) as pool:
                for name, tree in trees.items():
                    runs.append((name, None, pool.submit(instructions, tree, url, [0] * len(CASES), Path(tmp))))
                    for at, case in enumerate(CASES):
                        extra = [args.requests if n == at else 0 for n in range(len(CASES))]
                        runs.append((name, case, pool.submit(instructions, tree, url, extra, Path(tmp))))
                base = {name: done.result() for name, case, done in runs if case is None}
                for name, case, done in runs:
                    if case is not None:
                        stream, key = case
                        per = (done.result() - base[name]) / args.requests
                        report["results"].setdefault(name, {}).setdefault(
                            "streamed" if stream else "non-streamed", {})[key] = round(per)
    finally:
        redis.terminate()
    lines = [f"Instructions per request in process (callgrind, {args.requests} requests, {CONCURRENCY} at once):", "",
             "| tree | request | unlimited key | limited key (Redis) | added |", "|---|---|---:|---:|---:|"]
    for name, kinds in report["results"].items():
        for kind, keys in kinds.items():
            lines.append(f"| {name} | {kind} | {keys['unlimited']:,} | {keys['limited']:,} | "
                         f"{keys['limited'] - keys['unlimited']:+,} |")
    text = "\n".join(lines) + "\n"
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=2))
    args.out.with_suffix(".md").write_text(text)
    print(text)
    return report


if __name__ == "__main__":
    main()
