"""A batch of chat lines through the gateway against the same requests sent straight to the engine.

    python -m bench.batches [--lines 1000] [--tokens 64] [--concurrency 8,16,32] [--rounds 3]
                            [--engine-url URL] [--skip-engine] [--skip-fake]

**Real engine** (the embedded model, started on core 0 by ``launch_vllm.sh``; or ``--engine-url``):

1. *direct*: the batch's requests (non-streamed chats of ``--tokens`` tokens, greedy, ``ignore_eos``)
   sent at the engine in a closed loop at each ``--concurrency``: lines/s; the best one is the
   engine's best concurrency, and the gateway runs its batches with ``BATCH_CONCURRENCY`` at it;
2. *batch alone*: the same lines as an OpenAI batch through the gateway (SQLite, core 1), timed
   from ``POST /v1/batches`` to ``completed`` as the client sees it (validation and the output
   file included): lines/s, its ratio to direct, the gateway's CPU seconds per line;
3. *interactive TTFT*: 4 concurrent streamed chats (the interactive load) for ``--window``
   seconds alone, then while a batch runs on one gateway, alone, while a batch runs on the other,
   alone, ``--rounds`` times (the order alternating): each TTFT p50 with the batch over the mean
   of the two runs without it around it, and the batch's lines/s meanwhile. The gateways are the
   same but for ``FLOW_YIELD`` (the batch band yielding to live traffic,
   ``gateway/flow/yielding.py``): before and after in one run; ``--floors 1,4`` adds a gateway
   per other ``FLOW_YIELD_FLOOR``.

**Fake engine** (``bench/fake_upstream.py``, no generation delay): the gateway's own overhead, a
batch of ``--lines`` lines at ``BATCH_CONCURRENCY`` 32 against the same requests sent directly
at concurrency 32; lines/s and the gateway's CPU per line.

Everything is measured in one run; the machine is shared, so the ratios are what to read.
Writes bench/results/batches.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp
import openai
import orjson

from bench.engine_proc import confined_engine
from bench.machine import machine_info
from bench.procs import PYTHON, ServerProcess, free_port, start_fake_upstream, start_server, stop_server
from bench.stats import percentile

RESULTS = Path(__file__).resolve().parent / "results"
KEY = "sk-bench-batches-0123456789"
INTERACTIVE_CONCURRENCY = 4
INTERACTIVE_TOKENS = 32


def chat_body(model: str, n: int, tokens: int, *, stream: bool = False) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": f"Write item {n} of a list."}],
            "max_tokens": tokens, "temperature": 0, "ignore_eos": True, "stream": stream}


def batch_file(model: str, lines: int, tokens: int) -> bytes:
    return b"".join(orjson.dumps({"custom_id": f"line-{n}", "method": "POST", "url": "/v1/chat/completions",
                                  "body": chat_body(model, n, tokens)}) + b"\n" for n in range(lines))


async def model_of(base_url: str, headers: dict | None = None) -> str:
    async with aiohttp.ClientSession(headers=headers) as session, session.get(base_url + "/v1/models") as response:
        return (await response.json())["data"][0]["id"]


# --- direct ---------------------------------------------------------------------------------------
async def direct(base_url: str, model: str, lines: int, tokens: int, concurrency: int, *,
                 headers: dict | None = None) -> dict:
    """The lines sent straight at ``base_url`` by ``concurrency`` workers: lines/s."""
    todo = iter(range(lines))
    errors = 0

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal errors
        for n in todo:
            async with session.post(base_url + "/v1/chat/completions", json=chat_body(model, n, tokens)) as response:
                await response.read()
                errors += response.status != 200

    connector = aiohttp.TCPConnector(limit=concurrency + 4)
    async with aiohttp.ClientSession(connector=connector, headers=headers,
                                     timeout=aiohttp.ClientTimeout(total=600)) as session:
        started = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        seconds = time.perf_counter() - started
    return {"concurrency": concurrency, "seconds": seconds, "lines_per_s": lines / seconds, "errors": errors}


# --- through the gateway ---------------------------------------------------------------------------
async def submit(client: openai.AsyncOpenAI, model: str, lines: int, tokens: int) -> str:
    file = await client.files.create(file=("in.jsonl", io.BytesIO(batch_file(model, lines, tokens))),
                                     purpose="batch")
    return (await client.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions",
                                        completion_window="24h")).id


async def until_status(client: openai.AsyncOpenAI, batch_id: str, statuses: tuple[str, ...],
                       timeout: float = 3600.0):
    deadline = time.monotonic() + timeout
    while True:
        batch = await client.batches.retrieve(batch_id)
        if batch.status in statuses:
            return batch
        if time.monotonic() > deadline:
            raise RuntimeError(f"batch still {batch.status} after {timeout:.0f}s")
        await asyncio.sleep(0.1)


async def batch_alone(gateway: ServerProcess, model: str, lines: int, tokens: int) -> dict:
    async with openai.AsyncOpenAI(base_url=gateway.base_url + "/v1", api_key=KEY, max_retries=2) as client:
        cpu_before = await gateway.cpu_seconds()
        started = time.perf_counter()
        batch_id = await submit(client, model, lines, tokens)
        batch = await until_status(client, batch_id, ("completed", "failed", "expired", "cancelled"))
        seconds = time.perf_counter() - started
        cpu = await gateway.cpu_seconds() - cpu_before
    counts = batch.request_counts
    return {"status": batch.status, "completed": counts.completed, "failed": counts.failed, "seconds": seconds,
            "lines_per_s": lines / seconds, "gateway_cpu_s": cpu, "gateway_cpu_ms_per_line": cpu / lines * 1000}


async def interactive(base_url: str, model: str, window: float, headers: dict) -> list[float]:
    """TTFTs of ``INTERACTIVE_CONCURRENCY`` closed-loop streamed chats for ``window`` seconds."""
    ttfts: list[float] = []
    deadline = time.perf_counter() + window
    body = orjson.dumps(chat_body(model, 0, INTERACTIVE_TOKENS, stream=True))

    async def worker(session: aiohttp.ClientSession) -> None:
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            first = None
            async with session.post(base_url + "/v1/chat/completions", data=body) as response:
                async for chunk in response.content.iter_any():
                    if first is None and b'"content"' in chunk:
                        first = time.perf_counter() - started
            if response.status == 200 and first is not None:
                ttfts.append(first)

    async with aiohttp.ClientSession(headers={"content-type": "application/json", **headers},
                                     timeout=aiohttp.ClientTimeout(total=600)) as session:
        await asyncio.gather(*(worker(session) for _ in range(INTERACTIVE_CONCURRENCY)))
    return ttfts


async def with_batch(gateway: ServerProcess, model: str, *, lines: int, tokens: int, window: float,
                     headers: dict) -> tuple[list[float], bool, float]:
    """The interactive load through ``gateway`` while a batch of ``lines`` runs there (then cancelled): its
    TTFTs, whether the batch still ran at the end, and the batch's lines per second meanwhile."""
    async with openai.AsyncOpenAI(base_url=gateway.base_url + "/v1", api_key=KEY, max_retries=2) as client:
        batch_id = await submit(client, model, lines, tokens)
        await until_status(client, batch_id, ("in_progress",))
        first = (await client.batches.retrieve(batch_id)).request_counts
        during = await interactive(gateway.base_url, model, window, headers)
        batch = await client.batches.retrieve(batch_id)
        running = batch.status
        lines_done = batch.request_counts.completed - (first.completed if first else 0)
        with contextlib.suppress(openai.ConflictError):  # (it may have completed meanwhile)
            await client.batches.cancel(batch_id)
        await until_status(client, batch_id, ("cancelled", "completed"))
    return during, running == "in_progress", lines_done / window


async def ttft_rounds(gateways: dict[str, ServerProcess], model: str, *, lines: int, tokens: int, rounds: int,
                      window: float) -> list[dict]:
    """Per round: alone, then for each gateway a batch on it and alone again (the order of the gateways
    reversed every other round); each with-batch p50 over the mean of the two alone p50s around it.
    ``gateways``: the variants (FLOW_YIELD on and off, other floors), the same engine behind all."""
    headers = {"authorization": f"Bearer {KEY}"}
    found = []
    names = list(gateways)
    for number in range(rounds):
        order = names if number % 2 == 0 else names[::-1]
        alone = [await interactive(gateways[order[0]].base_url, model, window, headers)]
        row: dict = {"order": order}
        for name in order:
            during, running, rate = await with_batch(gateways[name], model, lines=lines, tokens=tokens, window=window,
                                               headers=headers)
            alone.append(await interactive(gateways[name].base_url, model, window, headers))
            base = (statistics.median(alone[-2]) + statistics.median(alone[-1])) / 2
            row[name] = {"alone_p50_ms": base * 1000, "with_batch_p50_ms": statistics.median(during) * 1000,
                         "with_batch_p90_ms": percentile(during, 90) * 1000,
                         "ratio": statistics.median(during) / base, "batch_still_running_at_end": running,
                         "batch_lines_per_s": rate,
                         "samples": [len(alone[-2]), len(during), len(alone[-1])]}
        row["load_average"] = os.getloadavg()[0]
        found.append(row)
    return found


async def start_gateway(engine_url: str, tmp: Path, *, concurrency: int, engine_key: str = "",
                        extra: dict | None = None) -> ServerProcess:
    port = free_port()
    env = {"HOST": "127.0.0.1", "PORT": str(port), "API_KEYS": KEY, "ACCESS_LOG": "false", "LOG_LEVEL": "warning",
           "VLLM_BASE_URL": engine_url, "VLLM_API_KEY": engine_key, "FEATURES": "none", "SESSION_STORE": "off",
           "DATABASE_URL": f"sqlite+aiosqlite:///{tmp}/gateway-{port}.db", "BATCH_CONCURRENCY": str(concurrency),
           "MAX_INFLIGHT_PER_KEY": "4096", "ENGINE_POLL_INTERVAL": "1"} | (extra or {})
    return await start_server(name=f"gateway-{port}", argv=[PYTHON, "-m", "gateway"], port=port, log_dir=tmp,
                              env=env, cores=frozenset({1}) if os.cpu_count() > 1 else None, health_path="/readyz",
                              startup_timeout=120)


# --- the two parts ---------------------------------------------------------------------------------
async def real_engine(args, tmp: Path) -> dict:
    async with contextlib.AsyncExitStack() as stack:
        engine_url = args.engine_url or await stack.enter_async_context(
            confined_engine(cores=frozenset({0}), log_dir=tmp))
        model = await model_of(engine_url)
        await direct(engine_url, model, 16, args.tokens, 8)  # warm-up
        runs = [await direct(engine_url, model, args.lines, args.tokens, c) for c in args.concurrency]
        best = max(runs, key=lambda run: run["lines_per_s"])
        gateway = await start_gateway(engine_url, tmp, concurrency=best["concurrency"])
        stack.push_async_callback(stop_server, gateway)
        alone = await batch_alone(gateway, model, args.lines, args.tokens)
        live = await direct(gateway.base_url, model, args.lines, args.tokens, best["concurrency"],
                            headers={"authorization": f"Bearer {KEY}"})  # the same, as live requests through it
        again = await direct(engine_url, model, args.lines, args.tokens, best["concurrency"])  # bracket the drift
        direct_rate = (best["lines_per_s"] + again["lines_per_s"]) / 2
        # The same gateway without the yield (FLOW_YIELD=false) beside it, and one per other floor asked
        # for: before and after in one run.
        variants = {"yield": gateway}
        for name, extra in [("no_yield", {"FLOW_YIELD": "false"})] + \
                [(f"floor_{floor}", {"FLOW_YIELD_FLOOR": str(floor)}) for floor in args.floors]:
            variants[name] = await start_gateway(engine_url, tmp, concurrency=best["concurrency"], extra=extra)
            stack.push_async_callback(stop_server, variants[name])
        # A batch of 3x the lines, so that it outlasts the interactive window (then it is cancelled).
        ttft = await ttft_rounds(variants, model, lines=3 * args.lines, tokens=args.tokens, rounds=args.rounds,
                                 window=args.window)
    medians = {name: statistics.median(r[name]["ratio"] for r in ttft) for name in variants} if ttft else None
    return {"model": model, "direct": runs, "direct_again": again, "live_through_gateway": live,
            "best_concurrency": best["concurrency"],
            "batch_alone": alone, "batch_over_direct": alone["lines_per_s"] / direct_rate, "ttft": ttft,
            "ttft_ratio_median": medians}


async def fake_engine(args, tmp: Path) -> dict:
    upstream = await start_fake_upstream(log_dir=tmp, cores=frozenset({0}) if os.cpu_count() > 1 else None)
    try:
        gateway = await start_gateway(upstream.base_url, tmp, concurrency=32)
        try:
            await direct(upstream.base_url, "fake-model", 100, args.tokens, 32)  # warm-up
            first = await direct(upstream.base_url, "fake-model", args.lines, args.tokens, 32)
            alone = await batch_alone(gateway, "fake-model", args.lines, args.tokens)
            second = await direct(upstream.base_url, "fake-model", args.lines, args.tokens, 32)
        finally:
            await stop_server(gateway)
    finally:
        await stop_server(upstream)
    return {"direct": [first, second], "batch_alone": alone}


def report(results: dict) -> str:
    out = ["# Batches (bench/batches.py)", "", f"Lines: {results['lines']} x {results['tokens']} tokens. "
           f"Load average {results['load_before']:.1f} -> {results['load_after']:.1f}.", ""]
    real = results.get("real")
    if real:
        out += ["## Real engine (embedded model, core 0; gateway core 1)", "",
                "| direct concurrency | lines/s |", "|---:|---:|"]
        out += [f"| {run['concurrency']} | {run['lines_per_s']:.2f} |" for run in real["direct"]]
        alone = real["batch_alone"]
        out += ["", f"- batch alone at BATCH_CONCURRENCY={real['best_concurrency']}: {alone['lines_per_s']:.2f} "
                f"lines/s ({alone['completed']} completed, {alone['failed']} failed), "
                f"**{real['batch_over_direct']:.2f}x** direct (direct again after it: "
                f"{real['direct_again']['lines_per_s']:.2f}); gateway CPU {alone['gateway_cpu_ms_per_line']:.2f} "
                "ms per line",
                f"- the same requests as live non-streamed requests through the gateway: "
                f"{real['live_through_gateway']['lines_per_s']:.2f} lines/s", "",
                "| round | gateway | TTFT p50 alone (ms) | with the batch (ms) | p90 with it (ms) | ratio | "
                "batch lines/s meanwhile | load average |", "|---:|---|---:|---:|---:|---:|---:|---:|"]
        out += [f"| {n + 1} | {name} | {r[name]['alone_p50_ms']:.1f} | {r[name]['with_batch_p50_ms']:.1f} | "
                f"{r[name]['with_batch_p90_ms']:.1f} | {r[name]['ratio']:.2f} | "
                f"{r[name].get('batch_lines_per_s', 0):.1f} | {r['load_average']:.1f} |"
                for n, r in enumerate(real["ttft"]) for name in r["order"]]
        if real["ttft_ratio_median"]:
            out += ["", "Median ratio: " + ", ".join(f"{name} **{value:.2f}**"
                                                    for name, value in real["ttft_ratio_median"].items())]
    fake = results.get("fake")
    if fake:
        alone = fake["batch_alone"]
        rate = statistics.mean(run["lines_per_s"] for run in fake["direct"])
        out += ["", "## Fake engine (the gateway's own overhead)", "",
                f"- direct at concurrency 32: {rate:.0f} lines/s; batch at BATCH_CONCURRENCY=32: "
                f"{alone['lines_per_s']:.0f} lines/s; gateway CPU {alone['gateway_cpu_ms_per_line']:.2f} ms per line"]
    return "\n".join(out) + "\n"


async def main_async(args) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-batches-") as tmp:
        load_before = os.getloadavg()[0]
        results = {"lines": args.lines, "tokens": args.tokens, "machine": machine_info(), "load_before": load_before}
        if not args.skip_fake:
            results["fake"] = await fake_engine(args, Path(tmp))
        if not args.skip_engine:
            results["real"] = await real_engine(args, Path(tmp))
        results["load_after"] = os.getloadavg()[0]
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--concurrency", type=lambda text: [int(v) for v in text.split(",")], default=[8, 16, 32])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window", type=float, default=20.0, help="seconds of interactive load per phase")
    parser.add_argument("--floors", type=lambda text: [int(v) for v in text.split(",") if v], default=[],
                        help="FLOW_YIELD_FLOOR values to measure beside the default's (a gateway each)")
    parser.add_argument("--engine-url", default=None)
    parser.add_argument("--skip-engine", action="store_true")
    parser.add_argument("--skip-fake", action="store_true")
    parser.add_argument("--out", default=str(RESULTS / "batches"))
    args = parser.parse_args()
    results = asyncio.run(main_async(args))
    Path(args.out + ".json").write_text(json.dumps(results, indent=2))
    Path(args.out + ".md").write_text(report(results))
    print(report(results))


if __name__ == "__main__":
    main()
