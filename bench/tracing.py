"""CPU per request with tracing off, on and sampled, on and not sampled: one run, interleaved rounds.

    python -m bench.tracing [--requests 400] [--rounds 5] [--concurrency 8] [--baseline-tree DIR]
                            [--no-pin] [--out bench/results/tracing.md]

Three gateways (plain relay, ``SESSION_STORE=off``, access log on) in front of the fast fake
upstream: ``off`` (no OTLP endpoint), ``sampled`` (every request traced and exported,
``OTEL_TRACES_SAMPLER_ARG=1``) and ``unsampled`` (tracing on, ratio 0: trace ids and
``traceparent`` made, nothing recorded or exported); with ``--baseline-tree``, that checkout's
gateway off (``before``) and sampled (``before_sampled``), to compare a change of the traced
path in the same run. Spans go to a sink in this process that
answers every OTLP export at once (its CPU is not the gateway's). Each round sends the same
requests (non-streamed: 16 tokens; streamed: 64 chunks) to each gateway in turn, and the
gateway process's user+system CPU time is read before and after: CPU per request, the median
over rounds; the ratios to ``off`` are what to read (the machine is shared and noisy). As in
``bench.run``, the gateways run pinned to one core and everything else to the other (``--no-pin``:
not pinned, as before 2026-12-06).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import aiohttp

from bench.contenders import AUTH_HEADERS, FAKE_MODEL, gateway_env
from bench.procs import PYTHON, Pinning, free_port, start_fake_upstream, start_server, stop_server

VARIANTS = {
    "off": {},
    "before": {},  # --baseline-tree: that checkout's gateway (e.g. main before a change), as "off"
    "sampled": {"OTEL_TRACES_SAMPLER_ARG": "1"},
    "unsampled": {"OTEL_TRACES_SAMPLER_ARG": "0"},
    "before_sampled": {"OTEL_TRACES_SAMPLER_ARG": "1"},  # --baseline-tree: that checkout's, as "sampled"
}
BASELINES = ("before", "before_sampled")
TRACED = ("sampled", "unsampled", "before_sampled")
SCENARIOS = {"non-streamed": (False, 16), "streamed": (True, 64)}


class Sink(BaseHTTPRequestHandler):
    exports = 0

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        Sink.exports += 1
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()


async def load(url: str, *, stream: bool, tokens: int, requests: int, concurrency: int) -> None:
    body = {"model": FAKE_MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": tokens,
            "stream": stream}
    left = requests
    async with aiohttp.ClientSession(headers=AUTH_HEADERS) as session:
        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                async with session.post(url + "/v1/chat/completions", json=body) as response:
                    await response.read()
                    assert response.status == 200, response.status
        await asyncio.gather(*(worker() for _ in range(concurrency)))


async def main(args: argparse.Namespace) -> str:
    sink = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{sink.server_address[1]}/v1/traces"
    tmp = Path(tempfile.mkdtemp(prefix="bench-tracing-"))
    # As bench.run: the gateway alone on one core, everything else (this load generator, the OTLP sink's
    # thread, the fake upstream) on the other, so the gateway's CPU time is not moved by competing with them.
    pinning = Pinning.choose(not args.no_pin)
    pinning.pin_self()
    upstream = await start_fake_upstream(log_dir=tmp, cores=pinning.load_cores)
    gateways = {}
    try:
        for name, extra in VARIANTS.items():
            if name in BASELINES and args.baseline_tree is None:
                continue
            port = free_port()
            env = {**gateway_env("off", upstream_url=upstream.base_url, port=port, tmp=tmp, postgres_dsn=None),
                   "ACCESS_LOG": "true", **extra}
            if name in TRACED:
                env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = endpoint
            if name in BASELINES:
                env["PYTHONPATH"] = str(args.baseline_tree)  # its gateway package wins over ours
            gateways[name] = await start_server(name=f"gateway-{name}", argv=[PYTHON, "-m", "gateway"], port=port,
                                                log_dir=tmp, env=env, cwd=str(tmp), startup_timeout=60,
                                                cores=pinning.server_cores)
        cpu: dict[tuple[str, str], list[float]] = {}
        for scenario, (stream, tokens) in SCENARIOS.items():
            for gateway in gateways.values():  # warm-up
                await load(gateway.base_url, stream=stream, tokens=tokens, requests=args.requests // 4,
                           concurrency=args.concurrency)
            for round_ in range(args.rounds):
                order = list(gateways.items())
                order = order[round_ % len(order):] + order[:round_ % len(order)]  # rotate who goes first
                for name, gateway in order:
                    before = await gateway.cpu_seconds()
                    await load(gateway.base_url, stream=stream, tokens=tokens, requests=args.requests,
                               concurrency=args.concurrency)
                    after = await gateway.cpu_seconds()
                    cpu.setdefault((scenario, name), []).append((after - before) / args.requests * 1000)
    finally:
        for gateway in gateways.values():
            await stop_server(gateway)
        await stop_server(upstream)
        sink.shutdown()
    names = [name for name in VARIANTS if any(key[1] == name for key in cpu)]
    lines = [f"CPU per request of the gateway process (ms, median of {args.rounds} interleaved rounds of "
             f"{args.requests} requests, concurrency {args.concurrency}; OTLP exports received: {Sink.exports}; "
             f"{pinning.describe()})", "",
             "| scenario | " + " | ".join(names) + " | " + " | ".join(f"{name} / off" for name in names[1:]) + " |",
             "|---" * (2 * len(names)) + "|"]
    for scenario in SCENARIOS:
        medians = {name: statistics.median(cpu[(scenario, name)]) for name in names}
        lines.append(f"| {scenario} | " + " | ".join(f"{medians[name]:.3f}" for name in names) + " | "
                     + " | ".join(f"{medians[name] / medians['off']:.2f}" for name in names[1:]) + " |")
    lines.append("")
    lines.append("Every round (ms per request): " + "; ".join(
        f"{scenario} {name}: " + ", ".join(f"{value:.3f}" for value in values)
        for (scenario, name), values in cpu.items()))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--baseline-tree", type=Path, default=None)
    parser.add_argument("--no-pin", action="store_true", help="do not pin the gateways and the load to cores")
    parser.add_argument("--out", type=Path, default=Path("bench/results/tracing.md"))
    arguments = parser.parse_args()
    report = asyncio.run(main(arguments))
    arguments.out.write_text(report)
    print(report)
