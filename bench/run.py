"""The benchmark: what the gateway costs compared with calling the upstream directly.

    python -m bench.run [--quick] [--variants off memory sqlite postgres]
                        [--engine-url http://127.0.0.1:8001] [--postgres-dsn URL]
                        [--baseline-tree DIR]

``--baseline-tree DIR`` also measures the gateway of another checkout (a git worktree of an
earlier commit), variant by variant, in the same interleaved rounds: ``sqlite@base`` next to
``sqlite``, so "before" and "after" are compared in one run on one machine state.

Starts the fast fake upstream and one gateway per variant (subprocesses on free ports,
pinned to cores when there are two or more), runs interleaved rounds (direct, each variant,
direct, ...) at each concurrency, streaming and not, then holds many concurrent streams
open through a fresh gateway per variant to measure memory, and (with --engine-url) compares
direct and gateway throughput against a real vLLM engine. Writes bench/results/results.json,
results.md and results.png.
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

from bench.cpu import wait_until_quiet
from bench.engine_probe import EngineCounter
from bench.engine_proc import confined_engine
from bench.loadgen import Scenario
from bench.machine import REPO_ROOT, machine_info
from bench.memory import measure_open_streams
from bench.postgres import PostgresUnavailable, throwaway_postgres
from bench.procs import (
    PYTHON,
    Pinning,
    ServerFailedToStart,
    ServerProcess,
    boost_priority,
    free_port,
    raise_fd_limit,
    start_fake_upstream,
    start_server,
    stop_server,
)
from bench.report import write_results
from bench.rounds import DIRECT, Target, measure_interleaved, summarise_scenario
from bench.targets import evaluate

RESULTS_DIR = Path(__file__).resolve().parent / "results"
VARIANTS = ("off", "memory", "sqlite", "postgres")
# A ~40-line aiohttp relay with no features (bench/relay_servers.py), measured in the same
# rounds: the floor a Python relay on this machine reaches, next to the gateway's figures.
REFERENCE = "bare-relay"
FAKE_MODEL = "fake-model"
API_KEY = "bench-key-not-a-secret"
AUTH_HEADERS = {"authorization": f"Bearer {API_KEY}"}

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


BASELINE = "@base"
BASELINE_TREE: Path | None = None  # set from --baseline-tree


def gateway_env(variant: str, *, upstream_url: str, port: int, tmp: Path,
                postgres_dsn: str | None) -> dict[str, str]:
    """The environment of a gateway under test (limits raised to fit the benchmark's load).

    ``variant`` is a SESSION_STORE value, with ``@base`` for the gateway of the baseline tree.
    """
    variant, _, base = variant.partition("@")
    env = {
        "VLLM_BASE_URL": upstream_url,
        "HOST": "127.0.0.1",
        "PORT": str(port),
        "API_KEYS": API_KEY,
        "SESSION_STORE": variant,
        "DATABASE_URL": f"sqlite+aiosqlite:///{tmp}/marketplace-{variant}-{port}.db",
        # Admission control stays on; its limits must not be what the benchmark measures.
        "MAX_INFLIGHT": "4096",
        "MAX_INFLIGHT_PER_KEY": "4096",
        "UPSTREAM_MAX_CONNECTIONS": "2048",
    }
    if variant == "sqlite":
        env["SESSIONS_DATABASE_URL"] = f"sqlite+aiosqlite:///{tmp}/sessions-{port}.db"
    elif variant == "postgres" and postgres_dsn:
        env["SESSIONS_DATABASE_URL"] = postgres_dsn
    if base:
        if BASELINE_TREE is None:
            raise ServerFailedToStart("a baseline variant needs --baseline-tree")
        env["PYTHONPATH"] = str(BASELINE_TREE)  # its gateway and marketplace packages win over ours
    return env


async def start_gateway(variant: str, *, upstream_url: str, tmp: Path, log_dir: Path,
                        cores: frozenset[int] | None, postgres_dsn: str | None,
                        name: str | None = None) -> ServerProcess:
    """``python -m gateway`` for one variant, healthy, or ServerFailedToStart."""
    if variant.partition("@")[0] == "postgres" and not postgres_dsn:
        raise ServerFailedToStart("no PostgreSQL available (see the postgres variant's error)")
    port = free_port()
    env = gateway_env(variant, upstream_url=upstream_url, port=port, tmp=tmp,
                      postgres_dsn=postgres_dsn)
    return await start_server(name=name or f"gateway-{variant}", argv=[PYTHON, "-m", "gateway"],
                              port=port, log_dir=log_dir, env=env, cores=cores, cwd=str(tmp),
                              startup_timeout=60)


async def start_reference_relay(*, upstream_url: str, log_dir: Path,
                                cores: frozenset[int] | None) -> ServerProcess:
    """The bare aiohttp relay, pinned like the gateway."""
    port = free_port()
    argv = [PYTHON, "-m", "bench.relay_servers", "--client", "aiohttp",
            "--upstream", upstream_url, "--port", str(port)]
    return await start_server(name=REFERENCE, argv=argv, port=port, log_dir=log_dir, cores=cores,
                              cwd=str(RESULTS_DIR.parent.parent))


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
                                status: dict[str, dict], companions: dict | None = None,
                                reference: bool = True) -> dict:
    """Interleaved direct/gateway rounds for every scenario; the variants' start-up status."""
    upstream = await start_fake_upstream(log_dir=tmp, cores=pinning.load_cores)
    gateways: dict[str, ServerProcess] = {}
    try:
        for variant in variants:
            try:
                gateways[variant] = await start_gateway(
                    variant, upstream_url=upstream.base_url, tmp=tmp, log_dir=tmp,
                    cores=pinning.server_cores, postgres_dsn=postgres_dsn)
                status[variant] = {"status": "ok"}
            except ServerFailedToStart as error:
                status[variant] = {"status": "failed", "error": str(error)}
                print(f"gateway variant {variant} failed to start:\n{error}", flush=True)
        if reference:
            try:
                gateways[REFERENCE] = await start_reference_relay(
                    upstream_url=upstream.base_url, log_dir=tmp, cores=pinning.server_cores)
            except ServerFailedToStart as error:
                print(f"reference relay failed to start:\n{error}", flush=True)
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
            if variant != REFERENCE and gateway.process.returncode is not None:
                status[variant] = {"status": "failed",
                                   "error": f"exited with {gateway.process.returncode} during "
                                            f"the run:\n{gateway.log_tail()}"}
    finally:
        for server in [*gateways.values(), upstream]:
            await stop_server(server)
    return by_scenario


async def measure_memory(*, plan: Plan, variants: list[str], pinning: Pinning, tmp: Path,
                         postgres_dsn: str | None) -> dict:
    """RSS of a fresh gateway per variant while it holds ``memory_streams`` open streams."""
    upstream = await start_fake_upstream(log_dir=tmp, cores=pinning.load_cores,
                                         chunk_delay=plan.memory_chunk_delay,
                                         name="fake-upstream-slow")
    results = {}
    try:
        for variant in variants:
            print(f"--- memory: {plan.memory_streams} open streams, {variant}", flush=True)
            try:
                gateway = await start_gateway(
                    variant, upstream_url=upstream.base_url, tmp=tmp, log_dir=tmp,
                    cores=pinning.server_cores, postgres_dsn=postgres_dsn,
                    name=f"gateway-{variant}-memory")
            except ServerFailedToStart as error:
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
    status: dict[str, dict] = {}
    results: dict = {"pinning": pinning.describe(), "loadavg_start": _loadavg(),
                     "machine_busy_before_start": quiet}
    with tempfile.TemporaryDirectory(prefix="bench-run-") as tmp_name:
        tmp = Path(tmp_name)
        async with contextlib.AsyncExitStack() as stack:
            postgres_dsn, db_companions = args.postgres_dsn, ()
            if any(v.partition("@")[0] == "postgres" for v in variants) and not postgres_dsn:
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
            runnable = [v for v in variants if v not in status]
            results["scenarios"] = await measure_fake_upstream(
                plan=plan, variants=runnable, pinning=pinning, tmp=tmp,
                postgres_dsn=postgres_dsn, status=status,
                companions={"postgres": db_companions, "postgres@base": db_companions})
            healthy = [v for v in variants if status.get(v, {}).get("status") == "ok"]
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
                        choices=[*VARIANTS, *(v + BASELINE for v in VARIANTS)])
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
    global BASELINE_TREE
    args = parse_args(argv)
    if args.baseline_tree is not None:
        BASELINE_TREE = args.baseline_tree.resolve()
        args.variants = [v for variant in args.variants if BASELINE not in variant
                         for v in (variant, variant + BASELINE)]
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
    reference = [REFERENCE] if REFERENCE in measured else []
    results["targets"] = evaluate(results, list(args.variants) + reference)
    write_results(results, args.out)
    print((args.out / "results.md").read_text())


if __name__ == "__main__":
    main()
