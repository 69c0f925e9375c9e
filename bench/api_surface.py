"""What the gateway adds to a streamed ``/v1/responses`` and ``/v1/messages``: one run, engine vs gateway.

    python -m bench.api_surface [--rounds 12] [--tokens 256] [--engine-url URL --engine-key KEY]

Starts the gateway as its own process (``python -m gateway``, SQLite sessions, one API key)
in front of the embedded-model engine (its own through ``launch_vllm.sh``, or the one
``--engine-url`` names), then sends the same greedy, fixed-length streamed request to the
engine directly and through the gateway, alternating which goes first in each round so
drift on a shared machine falls on both alike. Per request: time to the first event, and
the event rate over the whole stream (events / time from request to last event). Reported:
the median of the per-round differences of first-event time (the latency the gateway adds),
and the median of the per-round ratios of event rates (gateway / direct; 1.0 = the gateway
streams as fast as the engine). Results go to stdout
and bench/results/api_surface.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

from bench.engine_proc import confined_engine
from bench.machine import machine_info
from bench.procs import free_port, start_server, stop_server

RESULTS = Path(__file__).resolve().parent / "results"
GATEWAY_KEY = "sk-bench-api-surface"
MODEL = "qwen3-embedded"


def requests(tokens: int) -> dict[str, dict]:
    """The two streamed requests, greedy and of a fixed length."""
    return {
        "/v1/responses": {"model": MODEL, "input": "Tell me about lighthouses.", "max_output_tokens": tokens,
                          "temperature": 0, "ignore_eos": True, "stream": True, "store": False},
        # The Messages API has no ignore_eos; greedy, this prompt runs the whole length.
        "/v1/messages": {"model": MODEL, "max_tokens": tokens, "temperature": 0, "stream": True,
                         "messages": [{"role": "user", "content": "Hello there"}]},
    }


async def one_stream(session: aiohttp.ClientSession, url: str, body: dict, headers: dict) -> dict:
    started = time.perf_counter()
    first = None
    received = bytearray()
    async with session.post(url, json=body, headers=headers) as response:
        if response.status != 200:
            raise RuntimeError(f"{url}: HTTP {response.status}: {(await response.text())[:300]}")
        reported = response.headers.get("x-gateway-added-ms")  # the gateway's own account (not the engine's)
        async for chunk in response.content.iter_any():
            if first is None and b"data:" in chunk:
                first = time.perf_counter()
            received += chunk
    ended = time.perf_counter()
    events = received.count(b"\ndata:") + received.startswith(b"data:")  # (not keep-alive comments)
    # The rate over the whole stream, not from its first event: on a loaded machine a starved client
    # may read a whole stream in one go, and a rate from the first read is then meaningless.
    return {"first_event_ms": (first - started) * 1000, "events": events, "events_per_s": events / (ended - started),
            "gateway_added_ms": float(reported) if reported is not None else None}


async def measure(engine_url: str, engine_key: str, gateway_url: str, *, rounds: int, tokens: int) -> dict:
    results: dict = {}
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for path, body in requests(tokens).items():
            targets = {"direct": (engine_url + path, {"Authorization": f"Bearer {engine_key}"} if engine_key else {}),
                       "gateway": (gateway_url + path, {"Authorization": f"Bearer {GATEWAY_KEY}"})}
            for url, headers in targets.values():  # warm-up: connections, caches, compiled paths
                await one_stream(session, url, body, headers)
            runs: dict[str, list[dict]] = {"direct": [], "gateway": []}
            for round_ in range(rounds):
                order = ["direct", "gateway"] if round_ % 2 == 0 else ["gateway", "direct"]
                for name in order:
                    url, headers = targets[name]
                    runs[name].append(await one_stream(session, url, body, headers))
            added = [g["first_event_ms"] - d["first_event_ms"] for d, g in zip(runs["direct"], runs["gateway"],
                                                                                strict=True)]
            ratios = [g["events_per_s"] / d["events_per_s"] for d, g in zip(runs["direct"], runs["gateway"],
                                                                            strict=True)]
            results[path] = {
                "events_per_stream": runs["gateway"][0]["events"],
                "direct_first_event_ms_median": statistics.median(r["first_event_ms"] for r in runs["direct"]),
                "gateway_first_event_ms_median": statistics.median(r["first_event_ms"] for r in runs["gateway"]),
                "added_first_event_ms_median": statistics.median(added),
                # X-Gateway-Added-Ms: the gateway's own time before the response started, engine waits excluded
                "gateway_reported_added_ms_median": statistics.median(r["gateway_added_ms"] for r in runs["gateway"]),
                "direct_events_per_s_median": statistics.median(r["events_per_s"] for r in runs["direct"]),
                "gateway_events_per_s_median": statistics.median(r["events_per_s"] for r in runs["gateway"]),
                "event_rate_ratio_median": statistics.median(ratios),
                "event_rate_ratio_min": min(ratios),
                "runs": runs,
            }
    return results


def markdown(report: dict) -> str:
    lines = [f"Streamed Responses and Messages, engine directly vs through the gateway "
             f"({report['rounds']} rounds of {report['tokens']} tokens, alternating order, one run)", "",
             "| route | events/stream | first event, direct (median) | through the gateway (median) | "
             "added (median of per-round differences) | X-Gateway-Added-Ms (median) | event rate, direct | "
             "through the gateway | rate ratio gateway/direct (median, min) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for path, r in report["results"].items():
        lines.append(f"| `{path}` | {r['events_per_stream']} | {r['direct_first_event_ms_median']:.1f} ms | "
                     f"{r['gateway_first_event_ms_median']:.1f} ms | {r['added_first_event_ms_median']:+.1f} ms | "
                     f"{r['gateway_reported_added_ms_median']:.2f} ms | "
                     f"{r['direct_events_per_s_median']:.0f}/s | {r['gateway_events_per_s_median']:.0f}/s | "
                     f"{r['event_rate_ratio_median']:.3f} ({r['event_rate_ratio_min']:.3f}) |")
    machine = report["machine"]
    lines += ["", f"Machine: {machine.get('cpu_count')} CPUs ({machine.get('cpu_model')}), "
                  f"load average {report['load_before']:.1f} at start, "
                  f"{report['load_after']:.1f} at end (other processes share these CPUs). Engine: "
                  f"{report['engine']}. Gateway: `python -m gateway`, SESSION_STORE=sqlite, access log off.",
              "", "Wall-clock differences between two streams are as noisy as the machine is loaded; "
                  "X-Gateway-Added-Ms is the gateway's own account of the time it took before the response "
                  "started (engine waits excluded), measured inside the same requests."]
    return "\n".join(lines) + "\n"


@contextlib.asynccontextmanager
async def engine(args, log_dir: Path):
    if args.engine_url:
        yield args.engine_url.rstrip("/"), args.engine_key or "", f"the running engine at {args.engine_url}"
        return
    async with confined_engine(cores=frozenset(os.sched_getaffinity(0)), log_dir=log_dir) as url:
        yield url, "", "its own, launch_vllm.sh, embedded model"


async def main_async(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-api-surface-") as tmp:
        log_dir = Path(tmp)
        async with engine(args, log_dir) as (engine_url, engine_key, described):
            port = free_port()
            env = {"VLLM_BASE_URL": engine_url, "VLLM_API_KEY": engine_key, "PORT": str(port),
                   "HOST": "127.0.0.1", "API_KEYS": GATEWAY_KEY, "ACCESS_LOG": "false", "FEATURES": "none",
                   "SESSION_STORE": "sqlite", "DATABASE_URL": f"sqlite:///{log_dir}/gateway.db",
                   "ENGINE_POLL_INTERVAL": "60", "MODEL_ALIASES": ""}
            gateway = await start_server(name="gateway", argv=[sys.executable, "-m", "gateway"], port=port,
                                         log_dir=log_dir, env=env, health_path="/readyz", startup_timeout=60)
            try:
                load_before = os.getloadavg()[0]
                results = await measure(engine_url, engine_key, gateway.base_url, rounds=args.rounds,
                                        tokens=args.tokens)
                load_after = os.getloadavg()[0]
            finally:
                await stop_server(gateway)
    return {"rounds": args.rounds, "tokens": args.tokens, "engine": described, "machine": machine_info(),
            "load_before": load_before, "load_after": load_after, "results": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--engine-url", default="", help="use this engine instead of starting one")
    parser.add_argument("--engine-key", default="")
    args = parser.parse_args()
    report = asyncio.run(main_async(args))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "api_surface.json").write_text(json.dumps(report, indent=2))
    text = markdown(report)
    (RESULTS / "api_surface.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
