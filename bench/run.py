"""The benchmark: what the gateway costs compared with calling the upstream directly.

    python -m bench.run [--quick] [--variants off memory sqlite postgres off~noflow ...]
                        [--servers uvicorn granian uvicorn-h11 hypercorn socketify]
                        [--references bare-relay nginx]
                        [--engine-url http://127.0.0.1:8001] [--postgres-dsn URL]
                        [--baseline-tree DIR]

``--baseline-tree DIR`` also measures the gateway of another checkout (a git worktree of an
earlier commit), variant by variant, in the same interleaved rounds: ``sqlite@base`` next to
``sqlite``, so "before" and "after" are compared in one run on one machine state.

``--servers`` also serves each variant's gateway app with other ASGI servers
(``sqlite+granian`` next to ``sqlite``; bench/serve_gateway.py). The references, measured in
the same rounds, are the bare aiohttp relay (the Python floor) and Debian's nginx, one worker
(the compiled relay; scripts/install_nginx.sh installs it, and the run refuses to start
without it unless ``--references`` leaves it out).

Starts the fast fake upstream and one server per contender (bench/contenders.py; subprocesses
on free ports, pinned to cores when there are two or more), runs interleaved rounds (direct,
each contender, direct, ...) at each concurrency, streaming and not, then holds many
concurrent streams open through a fresh server per contender to measure memory, and (with
--engine-url) compares direct and gateway throughput against a real vLLM engine. Writes
bench/results/results.json, results.md and results.png, with issue 7's absolute targets and
issue 23's targets relative to the bare relay (bench/reference_targets.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import tempfile
from dataclasses import dataclass
from pathlib import Path

import aiohttp

import bench.contenders as contenders
from bench.contenders import (
    AUTH_HEADERS,
    BARE_RELAY,
    BASELINE,
    DEFAULT_VARIANT,
    FAKE_MODEL,
    NO_FLOW,
    REFERENCES,
    VARIANTS,
    gateway_env,
    split_name,
    start_contender,
    start_gateway,
    with_servers,
)
from bench.cpu import wait_until_quiet
from bench.engine_probe import EngineCounter
from bench.engine_proc import confined_engine
from bench.loadgen import Scenario
from bench.machine import REPO_ROOT, machine_info
from bench.memory import measure_open_streams
from bench.nginx import NAME as NGINX
from bench.nginx import NginxMissing, nginx_binary
from bench.postgres import PostgresUnavailable, throwaway_postgres
from bench.procs import (
    Pinning,
    ServerFailedToStart,
    ServerProcess,
    boost_priority,
    raise_fd_limit,
    start_fake_upstream,
    stop_server,
)
from bench.reference_targets import evaluate_relative
from bench.report import write_results
from bench.rounds import DIRECT, Target, measure_interleaved, summarise_scenario
from bench.serve_gateway import SERVERS
from bench.targets import evaluate

RESULTS_DIR = Path(__file__).resolve().parent / "results"

# The real engine: generate the full max_tokens (no early end-of-sequence), and count chunks
# rather than expect one per token (detokenisation may merge tokens into one chunk).
ENGINE_LOAD = {"exact_chunks": False, "extra_body": (("ignore_eos", True),)}


@dataclass(frozen=True)
class Plan:
    """How long and how hard to measure."""

    rounds: int
    duration: float
    warmup: float
    concurrencies: tuple[int, ...]
    nonstream_tokens: int
    stream_tokens: int
    memory_streams: int
    memory_tokens: int
    memory_chunk_delay: float
    engine_duration: float
    engine_scenarios: tuple[Scenario, ...]

    @classmethod
    def full(cls) -> "Plan":
        return cls(rounds=5, duration=2.0, warmup=0.5, concurrencies=(1, 32, 256),
                   nonstream_tokens=16, stream_tokens=256, memory_streams=1000,
                   memory_tokens=100, memory_chunk_delay=0.2, engine_duration=5.0,
                   engine_scenarios=(
                       Scenario(stream=True, max_tokens=128, concurrency=1, **ENGINE_LOAD),
                       Scenario(stream=True, max_tokens=128, concurrency=8, **ENGINE_LOAD),
                       Scenario(stream=False, max_tokens=16, concurrency=8, **ENGINE_LOAD)))

    @classmethod
    def quick(cls) -> "Plan":
        return cls(rounds=1, duration=0.4, warmup=0.1, concurrencies=(1, 32),
                   nonstream_tokens=16, stream_tokens=256, memory_streams=100,
                   memory_tokens=20, memory_chunk_delay=0.05, engine_duration=1.0,
                   engine_scenarios=(
                       Scenario(stream=True, max_tokens=32, concurrency=1, **ENGINE_LOAD),))

    def scenarios(self) -> list[Scenario]:
        return [Scenario(stream=stream, concurrency=c,
                         max_tokens=self.stream_tokens if stream else self.nonstream_tokens)
                for stream in (False, True) for c in self.concurrencies]


def _print_round(round_index: int, name: str, result: dict) -> None:
    ttft = result["ttft_p50_ms"]
    print(f"  round {round_index + 1} {name:9s} {result['rps']:9.1f} req/s  "
          f"p50 {result['latency_p50_ms']:8.2f} ms  p99 {result['latency_p99_ms']:8.2f} ms  "
          f"ttft {'-' if ttft is None else f'{ttft:.2f}':>6}  "
          f"chunks/s {result['chunks_per_s']:8.0f}  errors {result['errors']}  "
          f"others' CPU {_percent(result.get('others_cpu_share'))}", flush=True)


def _print_engine_round(round_index: int, name: str, result: dict) -> None:
    _print_round(round_index, name, result)
    others = result.get("upstream_requests_by_others")
    if others:
        print(f"    the engine finished ~{others:.0f} requests for somebody else meanwhile",
              flush=True)


def _percent(share: float | None) -> str:
    return "n/a" if share is None else f"{100 * share:.0f}%"


async def measure_fake_upstream(*, plan: Plan, variants: list[str], pinning: Pinning,
                                tmp: Path, postgres_dsn: str | None,
                                status: dict[str, dict], companions: dict | None = None) -> dict:
    """Interleaved direct/contender rounds for every scenario; each contender's start-up status.

    ``variants``: every contender's name (gateway variants and references, bench/contenders.py).
    """
    upstream = await start_fake_upstream(log_dir=tmp, cores=pinning.load_cores)
    gateways: dict[str, ServerProcess] = {}
    try:
        for variant in variants:
            try:
                gateways[variant] = await start_contender(
                    variant, upstream_url=upstream.base_url, tmp=tmp,
                    cores=pinning.server_cores, postgres_dsn=postgres_dsn)
                status[variant] = {"status": "ok"}
            except (ServerFailedToStart, NginxMissing) as error:
                status[variant] = {"status": "failed", "error": str(error)}
                print(f"{variant} failed to start:\n{error}", flush=True)
        targets = [Target(DIRECT, upstream.base_url, headers=AUTH_HEADERS)] + [
            Target(variant, gateway.base_url, gateway, headers=AUTH_HEADERS,
                   companions=(companions or {}).get(variant, ()))
            for variant, gateway in gateways.items()]
        by_scenario = {}
        if len(targets) > 1:
            for scenario in plan.scenarios():
                print(f"--- {scenario.key} ({scenario.max_tokens} tokens)", flush=True)
                raw = await measure_interleaved(
                    targets=targets, scenario=scenario, model=FAKE_MODEL, rounds=plan.rounds,
                    duration=plan.duration, warmup=plan.warmup, load_servers=[upstream],
                    on_round=_print_round)
                by_scenario[scenario.key] = {"scenario": {**scenario.__dict__,
                                                          "mode": scenario.mode},
                                             "targets": summarise_scenario(raw)}
        for variant, gateway in gateways.items():
            if gateway.process.returncode is not None:
                status[variant] = {"status": "failed",
                                   "error": f"exited with {gateway.process.returncode} during "
                                            f"the run:\n{gateway.log_tail()}"}
    finally:
        for server in [*gateways.values(), upstream]:
            await stop_server(server)
    return by_scenario


async def measure_memory(*, plan: Plan, variants: list[str], pinning: Pinning, tmp: Path,
                         postgres_dsn: str | None) -> dict:
    """RSS of a fresh server per contender while it holds ``memory_streams`` open streams."""
    upstream = await start_fake_upstream(log_dir=tmp, cores=pinning.load_cores,
                                         chunk_delay=plan.memory_chunk_delay,
                                         name="fake-upstream-slow")
    results = {}
    try:
        for variant in variants:
            print(f"--- memory: {plan.memory_streams} open streams, {variant}", flush=True)
            try:
                gateway = await start_contender(
                    variant, upstream_url=upstream.base_url, tmp=tmp,
                    cores=pinning.server_cores, postgres_dsn=postgres_dsn,
                    process_name=f"{variant}-memory")
            except (ServerFailedToStart, NginxMissing) as error:
                results[variant] = {"error": str(error).splitlines()[0]}
                continue
            try:
                await _warm_up(gateway)
                results[variant] = await measure_open_streams(
                    server=gateway, model=FAKE_MODEL, streams=plan.memory_streams,
                    tokens=plan.memory_tokens, headers=AUTH_HEADERS,
                    open_timeout=30 + plan.memory_streams * plan.memory_chunk_delay / 10)
                m = results[variant]
                per = m["bytes_per_stream"]
                print(f"  open {m['open_concurrently']}/{m['streams']}, errors {m['errors']}, "
                      f"RSS {m['rss_before_bytes'] / 2**20:.1f} -> "
                      f"{m['rss_during_bytes'] / 2**20:.1f} MiB, "
                      f"{'n/a' if per is None else f'{per / 1024:.1f}'} KiB/stream", flush=True)
            finally:
                await stop_server(gateway)
    finally:
        await stop_server(upstream)
    return results


async def _warm_up(gateway: ServerProcess) -> None:
    """A few requests first, so lazily imported code is not counted as per-stream memory."""
    from bench.loadgen import run_load

    for stream in (False, True):
        await run_load(base_url=gateway.base_url, model=FAKE_MODEL, duration=0.3, warmup=0,
                       scenario=Scenario(stream=stream, max_tokens=4, concurrency=4),
                       headers=AUTH_HEADERS)


async def _engine_model(engine_url: str) -> str:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        async with session.get(engine_url.rstrip("/") + "/v1/models") as response:
            response.raise_for_status()
            return (await response.json())["data"][0]["id"]


async def measure_engine(*, plan: Plan, engine_url: str, variants: list[str], tmp: Path,
                         postgres_dsn: str | None, gateway_cores: frozenset[int] | None = None
                         ) -> dict:
    """Direct vs gateway against the real engine.

    ``gateway_cores``: where the gateway runs (with the load generator) when the engine is
    confined to other cores (``--start-engine``); None: unpinned, sharing the engine's cores.
    """
    try:
        model = await _engine_model(engine_url)
    except (TimeoutError, aiohttp.ClientError, OSError, KeyError, IndexError) as error:
        return {"skipped": f"engine at {engine_url} not usable: {error!r}"}
    out = {"url": engine_url, "model": model, "rounds": plan.rounds,
           "duration_s": plan.engine_duration, "variants": {}}
    for variant in variants:
        try:
            gateway = await start_gateway(variant, upstream_url=engine_url, tmp=tmp,
                                          log_dir=tmp, cores=gateway_cores,
                                          postgres_dsn=postgres_dsn,
                                          name=f"gateway-{variant}-engine")
        except ServerFailedToStart as error:
            out["variants"][variant] = {"error": str(error).splitlines()[0]}
            continue
        by_scenario = {}
        try:
            targets = [Target(DIRECT, engine_url, headers=AUTH_HEADERS),
                       Target(variant, gateway.base_url, gateway, headers=AUTH_HEADERS)]
            for scenario in plan.engine_scenarios:
                print(f"--- engine {scenario.key} ({scenario.max_tokens} tokens), {variant}",
                      flush=True)
                raw = await measure_interleaved(
                    targets=targets, scenario=scenario, model=model, rounds=plan.rounds,
                    duration=plan.engine_duration, warmup=min(plan.warmup, 1.0),
                    upstream_counter=EngineCounter(engine_url), on_round=_print_engine_round)
                summary = summarise_scenario(raw)
                direct, relayed = summary[DIRECT]["median"], summary[variant]
                by_scenario[scenario.key] = {
                    "direct_rps": direct["rps"], "gateway_rps": relayed["median"]["rps"],
                    **relayed["vs_direct"],
                    "errors": direct["errors"] + relayed["median"]["errors"],
                    "engine_requests_by_others": sum(
                        run.get("upstream_requests_by_others") or 0
                        for runs in raw.values() for run in runs),
                    "raw": summary}
        finally:
            await stop_server(gateway)
        out["variants"][variant] = {"by_scenario": by_scenario}
    return out


async def run(args: argparse.Namespace, plan: Plan) -> dict:
    # SIGTERM cancels the run like Ctrl-C does, so every server and the database are stopped.
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, asyncio.current_task().cancel)
    quiet = await wait_until_quiet(max_wait=args.wait_quiet)
    pinning = Pinning.choose(not args.no_pin)
    pinning.pin_self()
    print(f"pinning: {pinning.describe()}", flush=True)
    variants = list(args.variants)
    contenders = variants + list(args.references)
    status: dict[str, dict] = {}
    results: dict = {"pinning": pinning.describe(), "loadavg_start": _loadavg(),
                     "machine_busy_before_start": quiet}
    with tempfile.TemporaryDirectory(prefix="bench-run-") as tmp_name:
        tmp = Path(tmp_name)
        async with contextlib.AsyncExitStack() as stack:
            postgres_dsn, db_companions = args.postgres_dsn, ()
            if any(split_name(v)[0] == "postgres" for v in variants) and not postgres_dsn:
                try:
                    cluster = await stack.enter_async_context(throwaway_postgres())
                    postgres_dsn, db_companions = cluster.dsn, (cluster.server,)
                    # The database works for the gateway: it shares the gateway's core, and
                    # its CPU time counts as the postgres variant's cost.
                    if pinning.server_cores:
                        cluster.server.pin(pinning.server_cores)
                except PostgresUnavailable as error:
                    status["postgres"] = {"status": "failed", "error": str(error)}
                    print(f"postgres variant unavailable: {error}", flush=True)
            if "postgres" in status:  # every variant on PostgreSQL, whichever server or tree
                status |= {v: status["postgres"] for v in variants if split_name(v)[0] == "postgres"}
            runnable = [v for v in contenders if v not in status]
            results["scenarios"] = await measure_fake_upstream(
                plan=plan, variants=runnable, pinning=pinning, tmp=tmp,
                postgres_dsn=postgres_dsn, status=status,
                companions={v: db_companions for v in variants if split_name(v)[0] == "postgres"})
            healthy = [v for v in contenders if status.get(v, {}).get("status") == "ok"]
            results["memory"] = {} if args.skip_memory else await measure_memory(
                plan=plan, variants=healthy, pinning=pinning, tmp=tmp, postgres_dsn=postgres_dsn)
            engine_variants = [v for v in args.engine_variants if v in healthy]
            if args.start_engine and pinning.load_cores is not None:
                # Engine on the load core, gateway + load generator on the server core.
                async with confined_engine(cores=pinning.load_cores, log_dir=tmp) as engine_url:
                    os.sched_setaffinity(0, pinning.server_cores)
                    results["engine"] = await measure_engine(
                        plan=plan, engine_url=engine_url, variants=engine_variants, tmp=tmp,
                        postgres_dsn=postgres_dsn, gateway_cores=pinning.server_cores)
                    results["engine"]["placement"] = (
                        f"engine confined to core {sorted(pinning.load_cores)}; gateway and load "
                        f"generator on core {sorted(pinning.server_cores)}")
                    pinning.pin_self()
            elif args.engine_url:
                results["engine"] = await measure_engine(
                    plan=plan, engine_url=args.engine_url, variants=engine_variants, tmp=tmp,
                    postgres_dsn=postgres_dsn)
                results["engine"]["placement"] = "external engine; gateway unpinned"
            else:
                results["engine"] = {"skipped": "no --engine-url or --start-engine given"}
            if args.keep_logs:
                _copy_logs(tmp, args.keep_logs)
    results["variants"] = {v: status.get(v, {"status": "failed", "error": "not run"})
                           for v in variants}
    results["references"] = {r: status.get(r, {"status": "failed", "error": "not run"})
                             for r in args.references}
    results["loadavg_end"] = _loadavg()
    return results


def _copy_logs(tmp: Path, destination: Path) -> None:
    destination.mkdir(parents=True, exist_ok=True)
    for log in tmp.glob("*.log"):
        (destination / log.name).write_bytes(log.read_bytes())


def _loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS),
                        choices=[*VARIANTS, *(v + BASELINE for v in VARIANTS), *(v + NO_FLOW for v in VARIANTS)])
    parser.add_argument("--servers", nargs="+", default=["uvicorn"], choices=sorted(SERVERS),
                        help="also serve each variant's gateway app with these ASGI servers "
                             "(uvicorn, httptools + uvloop, is today's; others need "
                             "scripts/install_bench_servers.sh)")
    parser.add_argument("--server-variants", nargs="+", default=[DEFAULT_VARIANT], choices=VARIANTS,
                        help="the variants --servers applies to (default: the gateway's default, "
                             f"{DEFAULT_VARIANT})")
    parser.add_argument("--references", nargs="*", default=list(REFERENCES), choices=REFERENCES,
                        help="same-run references (default: the bare aiohttp relay and nginx)")
    parser.add_argument("--engine-url", help="also measure end to end against this vLLM")
    parser.add_argument("--start-engine", action="store_true",
                        help="also measure end to end against an engine of its own (embedded "
                             "model) confined to the load core, the gateway on the other")
    parser.add_argument("--engine-variants", nargs="+", default=["off"], choices=VARIANTS)
    parser.add_argument("--postgres-dsn", help="use this database instead of a throw-away one "
                                               "(postgresql+asyncpg://...)")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--duration", type=float, help="seconds per target per round")
    parser.add_argument("--concurrency", type=int, nargs="+")
    parser.add_argument("--memory-streams", type=int)
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--no-pin", action="store_true", help="do not pin processes to cores")
    parser.add_argument("--nice", type=int, default=-10,
                        help="niceness for the benchmark and its servers (default -10)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    parser.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS",
                        help="first wait up to this long for other work on the machine to "
                             "settle (<= 15%% busy over 5 s)")
    parser.add_argument("--keep-logs", type=Path, help="copy the servers' logs here")
    parser.add_argument("--baseline-tree", type=Path,
                        help="also measure the gateway of this checkout (e.g. a git worktree of the commit "
                             "before a change): each variant V gets a V@base twin in the same rounds")
    return parser.parse_args(argv)


def build_plan(args: argparse.Namespace) -> Plan:
    plan = Plan.quick() if args.quick else Plan.full()
    overrides = {"rounds": args.rounds, "duration": args.duration,
                 "concurrencies": tuple(args.concurrency) if args.concurrency else None,
                 "memory_streams": args.memory_streams}
    return Plan(**{**plan.__dict__, **{k: v for k, v in overrides.items() if v is not None}})


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.baseline_tree is not None:
        contenders.BASELINE_TREE = args.baseline_tree.resolve()
        args.variants = [v for variant in args.variants if BASELINE not in variant
                         for v in (variant, variant + BASELINE)]
    args.variants = with_servers(args.variants, args.servers, only=args.server_variants)
    if NGINX in args.references:
        try:
            nginx_binary()
        except NginxMissing as error:
            raise SystemExit(f"{error}; or leave it out with --references {BARE_RELAY}") from None
    plan = build_plan(args)
    fd_limit = raise_fd_limit()
    niceness = boost_priority(args.nice)
    info = machine_info()
    os.chdir(REPO_ROOT)  # `python -m gateway` and `-m bench.*` resolve from the repo

    import uvloop

    results = uvloop.run(run(args, plan))
    results = {"machine": info, "niceness": niceness, "fd_limit": fd_limit,
               "config": {**{k: v for k, v in plan.__dict__.items() if k != "engine_scenarios"},
                          "engine_scenarios": [{**s.__dict__, "extra_body": dict(s.extra_body)}
                                               for s in plan.engine_scenarios],
                          "quick": args.quick, "api_key_auth": True,
                          "gateway_env_example": gateway_env(
                              "sqlite", upstream_url="http://127.0.0.1:UPSTREAM", port=0,
                              tmp=Path("/tmp/bench-run"), postgres_dsn=None)},
               **results}
    measured = {name for block in results.get("scenarios", {}).values() for name in block["targets"]}
    references = [r for r in args.references if r in measured]
    results["targets"] = evaluate(results, list(args.variants) + references)
    results["default_variant"] = DEFAULT_VARIANT
    results["relative_targets"] = evaluate_relative(results, list(args.variants) + references)
    write_results(results, args.out)
    print((args.out / "results.md").read_text())


if __name__ == "__main__":
    main()
