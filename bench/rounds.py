"""Interleaved rounds (direct, relay A, relay B, direct, ...) and their same-run comparison.

Machine noise (frequency changes, a neighbour's burst) hits every target of a round alike,
so figures are medians across rounds and every relay is compared with the direct runs of
the same rounds, never with a number from another run.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.loadgen import Scenario, run_load
from bench.procs import ServerProcess
from bench.stats import difference, median_or_none, ratio

DIRECT = "direct"

_MEDIAN_FIELDS = ("rps", "latency_p50_ms", "latency_p90_ms", "latency_p99_ms", "ttft_p50_ms",
                  "ttft_p99_ms", "chunks_per_s", "server_cpu_us_per_request")
_SUM_FIELDS = ("requests", "errors", "chunks")


@dataclass(frozen=True)
class Target:
    """Somewhere to send load: the upstream itself or a server relaying to it."""

    name: str
    base_url: str
    process: ServerProcess | None = None  # whose CPU time to attribute to the requests
    headers: dict | None = None


async def measure_round(*, target: Target, scenario: Scenario, model: str, duration: float,
                        warmup: float) -> dict:
    """One measured run against one target, with the server's CPU time per request."""
    cpu_before: list[float] = []

    async def note_cpu() -> None:
        if target.process is not None:
            cpu_before.append(await target.process.cpu_seconds())

    result = (await run_load(base_url=target.base_url, model=model, scenario=scenario,
                             duration=duration, warmup=warmup, headers=target.headers,
                             before_measuring=note_cpu)).to_dict()
    if cpu_before:
        # Measured window only; requests still in flight at the end add a little.
        cpu = await target.process.cpu_seconds() - cpu_before[0]
        result["server_cpu_s"] = cpu
        result["server_cpu_us_per_request"] = (cpu * 1e6 / result["requests"]
                                               if result["requests"] else None)
    return result


async def measure_interleaved(*, targets: list[Target], scenario: Scenario, model: str,
                              rounds: int, duration: float, warmup: float,
                              on_round=None) -> dict[str, list[dict]]:
    """``rounds`` rounds, each visiting every target once in order; raw results per target."""
    results: dict[str, list[dict]] = {target.name: [] for target in targets}
    for round_index in range(rounds):
        for target in targets:
            result = await measure_round(target=target, scenario=scenario, model=model,
                                         duration=duration, warmup=warmup)
            results[target.name].append(result)
            if on_round is not None:
                on_round(round_index, target.name, result)
    return results


def aggregate(runs: list[dict]) -> dict:
    """Medians across rounds (sums for counts)."""
    summary = {name: median_or_none([run.get(name) for run in runs]) for name in _MEDIAN_FIELDS}
    summary |= {name: sum(run.get(name) or 0 for run in runs) for name in _SUM_FIELDS}
    summary["rounds"] = len(runs)
    return summary


def compare(direct: dict, relayed: dict) -> dict:
    """A relayed target against direct: throughput ratios and added milliseconds."""
    return {
        "rps_ratio": ratio(relayed["rps"], direct["rps"]),
        "chunks_per_s_ratio": ratio(relayed["chunks_per_s"], direct["chunks_per_s"]),
        "added_p50_ms": difference(relayed["latency_p50_ms"], direct["latency_p50_ms"]),
        "added_p90_ms": difference(relayed["latency_p90_ms"], direct["latency_p90_ms"]),
        "added_p99_ms": difference(relayed["latency_p99_ms"], direct["latency_p99_ms"]),
        "added_ttft_p50_ms": difference(relayed["ttft_p50_ms"], direct["ttft_p50_ms"]),
        "added_ttft_p99_ms": difference(relayed["ttft_p99_ms"], direct["ttft_p99_ms"]),
    }


def summarise_scenario(raw: dict[str, list[dict]]) -> dict:
    """Per target: raw rounds, medians and (for relays) the comparison with direct."""
    direct = aggregate(raw[DIRECT])
    summary = {DIRECT: {"median": direct, "rounds": raw[DIRECT]}}
    for name, runs in raw.items():
        if name == DIRECT:
            continue
        median = aggregate(runs)
        summary[name] = {"median": median, "vs_direct": compare(direct, median), "rounds": runs}
    return summary
