"""Which upstream HTTP client should the gateway relay with? Measured, same run, same load.

Starts the fake upstream and one minimal relay per client (bench/relay_servers.py, identical
apart from the client), then runs interleaved rounds (direct, relay 1, relay 2, ...) at
concurrency 1 and 32, streaming and not, and writes bench/results/relay_clients.{md,json}.

    python -m bench.relay_clients [--quick] [--clients aiohttp httpx-default ...]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import orjson

from bench.cpu import wait_until_quiet
from bench.loadgen import Scenario
from bench.machine import machine_info
from bench.procs import (
    PYTHON,
    Pinning,
    ServerFailedToStart,
    boost_priority,
    free_port,
    raise_fd_limit,
    start_fake_upstream,
    start_server,
    stop_server,
)
from bench.relay_servers import RELAYS
from bench.rounds import DIRECT, Target, measure_interleaved, summarise_scenario

RESULTS_DIR = Path(__file__).resolve().parent / "results"
MODEL = "fake-model"


def scenarios(*, stream_tokens: int) -> list[Scenario]:
    return [Scenario(stream=False, max_tokens=16, concurrency=1),
            Scenario(stream=False, max_tokens=16, concurrency=32),
            Scenario(stream=True, max_tokens=stream_tokens, concurrency=1),
            Scenario(stream=True, max_tokens=stream_tokens, concurrency=32)]


async def measure(*, clients: list[str], rounds: int, duration: float, warmup: float,
                  stream_tokens: int, pin: bool, log_dir: Path, wait_quiet: float = 0) -> dict:
    await wait_until_quiet(max_wait=wait_quiet)
    loadavg_start = _loadavg()
    pinning = Pinning.choose(pin)
    pinning.pin_self()
    print(f"pinning: {pinning.describe()}", flush=True)
    upstream = await start_fake_upstream(log_dir=log_dir, cores=pinning.load_cores)
    relays, failed = {}, {}
    try:
        for client in clients:
            port = free_port()
            argv = [PYTHON, "-m", "bench.relay_servers", "--client", client,
                    "--upstream", upstream.base_url, "--port", str(port)]
            try:
                relays[client] = await start_server(name=f"relay-{client}", argv=argv,
                                                    port=port, log_dir=log_dir,
                                                    cores=pinning.server_cores,
                                                    cwd=str(RESULTS_DIR.parent.parent))
            except ServerFailedToStart as error:
                failed[client] = str(error)
                print(f"relay {client} failed to start: {error}", flush=True)
        targets = [Target(DIRECT, upstream.base_url)] + [
            Target(name, relay.base_url, relay) for name, relay in relays.items()]
        by_scenario = {}
        for scenario in scenarios(stream_tokens=stream_tokens):
            print(f"--- {scenario.key}", flush=True)
            raw = await measure_interleaved(
                targets=targets, scenario=scenario, model=MODEL, rounds=rounds,
                duration=duration, warmup=warmup, load_servers=[upstream],
                on_round=_print_round)
            by_scenario[scenario.key] = {"scenario": scenario.__dict__,
                                         "targets": summarise_scenario(raw)}
    finally:
        for server in [*relays.values(), upstream]:
            await stop_server(server)
    return {"pinning": pinning.describe(), "loadavg_start": loadavg_start,
            "loadavg_end": _loadavg(), "rounds": rounds,
            "duration_s": duration, "warmup_s": warmup, "clients": clients,
            "failed": failed, "scenarios": by_scenario}


def _loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _print_round(round_index: int, name: str, result: dict) -> None:
    print(f"  round {round_index + 1} {name:14s} {result['rps']:9.1f} req/s  "
          f"p50 {result['latency_p50_ms']:7.2f} ms  chunks/s {result['chunks_per_s']:9.0f}  "
          f"errors {result['errors']}", flush=True)


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def render_markdown(results: dict) -> str:
    """The decision table: each client's throughput ratio and added latency vs direct."""
    lines = [
        "# Upstream HTTP client for the relay: measured",
        "",
        f"Fake upstream (bench/fake_upstream.py) behind a minimal bare-ASGI relay on uvicorn "
        f"(uvloop, httptools) that differs only in its client. {results['pinning']}; "
        f"niceness {results.get('niceness', 0)}; load average at start/end "
        f"{results.get('loadavg_start', '?')} / {results.get('loadavg_end', '?')} "
        f"(the machine is shared: CPU per request is the steadiest column). "
        f"{results['rounds']} interleaved rounds of {results['duration_s']:g} s per target "
        f"(after {results['warmup_s']:g} s warm-up); medians across rounds; ratio = relay / "
        f"direct per round (paired), median across rounds. Streaming = "
        f"{_stream_tokens(results)} chunks per response. Others' CPU: share of the machine used "
        f"by processes outside the benchmark during the window.",
        "",
        "| scenario | client | req/s | req/s ratio | chunks/s ratio | p50 ms (added) "
        "| p99 ms (added) | TTFT p50 added ms | relay CPU us/req | others' CPU | errors |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key, block in results["scenarios"].items():
        direct = block["targets"][DIRECT]["median"]
        lines.append(f"| {key} | direct | {direct['rps']:.0f} | 1.00 | "
                     f"{'1.00' if direct['chunks_per_s'] else '-'} | "
                     f"{direct['latency_p50_ms']:.2f} | {direct['latency_p99_ms']:.2f} | - | - "
                     f"| {_share(direct.get('others_cpu_share'))} | {direct['errors']} |")
        for name, target in block["targets"].items():
            if name == DIRECT:
                continue
            m, v = target["median"], target["vs_direct"]
            chunks = _fmt(v["chunks_per_s_ratio"], ".2f") if m["chunks_per_s"] else "-"
            lines.append(
                f"| {key} | {name} | {m['rps']:.0f} | {_fmt(v['rps_ratio'], '.2f')} | {chunks} "
                f"| {m['latency_p50_ms']:.2f} ({_fmt(v['added_p50_ms'], '+.2f')}) "
                f"| {m['latency_p99_ms']:.2f} ({_fmt(v['added_p99_ms'], '+.2f')}) "
                f"| {_fmt(v['added_ttft_p50_ms'], '+.2f')} "
                f"| {_fmt(m['server_cpu_us_per_request'], '.0f')} "
                f"| {_share(m.get('others_cpu_share'))} | {m['errors']} |")
    lines += ["", *_summary(results)]
    for client, error in results["failed"].items():
        lines.append(f"\n**{client} failed to start:** `{error.splitlines()[0]}`")
    info = results["machine"]
    lines += ["", f"Machine: {info['cpu_model']}, {info['cpu_count']} cores, "
                  f"Python {info['python']}, commit {info['git_commit']}.", ""]
    return "\n".join(lines)


def _summary(results: dict) -> list[str]:
    """At concurrency 32: each client's throughput ratios and CPU per request, best first."""
    blocks = results["scenarios"]
    if "nonstream-c32" not in blocks or "stream-c32" not in blocks:
        return []
    rows = []
    for name in blocks["nonstream-c32"]["targets"]:
        if name == DIRECT:
            continue
        plain = blocks["nonstream-c32"]["targets"][name]
        stream = blocks["stream-c32"]["targets"][name]
        rows.append((name, plain["vs_direct"]["rps_ratio"],
                     stream["vs_direct"]["chunks_per_s_ratio"],
                     plain["median"]["server_cpu_us_per_request"],
                     stream["median"]["server_cpu_us_per_request"]))
    rows.sort(key=lambda row: (row[3] or float("inf")) + (row[4] or float("inf")))
    lines = ["## At 32 concurrent requests (best first, by relay CPU per request)", "",
             "| client | non-streaming req/s ratio | streaming chunks/s ratio "
             "| CPU us/req non-streaming | CPU us/req streaming |",
             "|---|---:|---:|---:|---:|"]
    for name, plain_ratio, stream_ratio, plain_cpu, stream_cpu in rows:
        lines.append(f"| {name} | {_fmt(plain_ratio, '.2f')} | {_fmt(stream_ratio, '.2f')} "
                     f"| {_fmt(plain_cpu, '.0f')} | {_fmt(stream_cpu, '.0f')} |")
    best = rows[0][0] if rows else "n/a"
    lines += ["", f"Least CPU per relayed request in this run: **{best}**."]
    return lines


def _stream_tokens(results: dict) -> int:
    for block in results["scenarios"].values():
        if block["scenario"]["stream"]:
            return block["scenario"]["max_tokens"]
    return 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few seconds, smoke only")
    parser.add_argument("--clients", nargs="+", default=list(RELAYS), choices=sorted(RELAYS))
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--duration", type=float)
    parser.add_argument("--no-pin", action="store_true")
    parser.add_argument("--nice", type=int, default=-10,
                        help="niceness for the benchmark and its servers (default -10)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    parser.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS",
                        help="first wait up to this long for other work on the machine to "
                             "settle (<= 15%% busy over 5 s)")
    args = parser.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 3)
    duration = args.duration or (0.5 if args.quick else 3.0)
    raise_fd_limit()
    niceness = boost_priority(args.nice)
    with tempfile.TemporaryDirectory(prefix="bench-relays-") as tmp:
        import uvloop

        results = uvloop.run(measure(
            clients=args.clients, rounds=rounds, duration=duration,
            warmup=0.2 if args.quick else 0.5, stream_tokens=256, pin=not args.no_pin,
            log_dir=Path(tmp), wait_quiet=args.wait_quiet))
    results = {"machine": machine_info(), "niceness": niceness, **results}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "relay_clients.json").write_bytes(
        orjson.dumps(results, option=orjson.OPT_INDENT_2))
    markdown = render_markdown(results)
    (args.out / "relay_clients.md").write_text(markdown)
    print(markdown)


if __name__ == "__main__":
    main()
