"""Interleaved rounds (direct, relay A, relay B, direct, ...) and their same-run comparison.

Machine noise (frequency changes, a neighbour's burst) hits neighbouring runs alike, so
every relay run is paired with the direct run of the same round: ratios and added
milliseconds are computed per round, then the median across rounds is reported (a round
disturbed by other work moves one pair, not the result). Medians of the raw figures are
kept alongside.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.cpu import snapshot, usage_between
from bench.loadgen import Scenario, run_load
from bench.procs import ServerProcess
from bench.stats import difference, median_or_none, ratio

DIRECT = "direct"

_MEDIAN_FIELDS = ("rps", "latency_p50_ms", "latency_p90_ms", "latency_p99_ms", "ttft_p50_ms",
                  "ttft_p99_ms", "chunks_per_s", "server_cpu_us_per_request",
                  "load_cpu_us_per_request", "others_cpu_share",
                  "upstream_requests_by_others")
_SUM_FIELDS = ("requests", "errors", "chunks")


@dataclass(frozen=True)
class Target:
    """Somewhere to send load: the upstream itself or a server relaying to it."""

    name: str
    base_url: str
    process: ServerProcess | None = None  # whose CPU time to attribute to the requests
    headers: dict | None = None
    companions: tuple = ()  # more processes whose CPU time is this target's cost


async def measure_round(*, target: Target, scenario: Scenario, model: str, duration: float,
                        warmup: float, load_servers: list[ServerProcess] = (),
                        upstream_counter=None) -> dict:
    """One measured run against one target, with CPU use per request (measured window only).

    ``upstream_counter`` (async, returns the upstream's finished-request count) lets the
    result say how many requests the upstream finished for somebody else meanwhile.
    """
    before = []
    counted_before = []

    async def note_cpu() -> None:
        if upstream_counter is not None:
            counted_before.append(await upstream_counter())
        before.append(await snapshot(load_servers=list(load_servers), server=target.process,
                                     companions=target.companions))

    result = (await run_load(base_url=target.base_url, model=model, scenario=scenario,
                             duration=duration, warmup=warmup, headers=target.headers,
                             before_measuring=note_cpu)).to_dict()
    after = await snapshot(load_servers=list(load_servers), server=target.process,
                           companions=target.companions)
    # Requests still in flight when the window closes add a little to the CPU figures.
    result |= usage_between(before[0], after, requests=result["requests"])
    if upstream_counter is not None:
        counted_after = await upstream_counter()
        result["upstream_requests_by_others"] = (
            None if counted_after is None or counted_before[0] is None
            # Requests in flight at either edge of the window make this approximate.
            else max(0.0, counted_after - counted_before[0] - result["requests"]))
    return result


async def measure_interleaved(*, targets: list[Target], scenario: Scenario, model: str,
                              rounds: int, duration: float, warmup: float,
                              load_servers: list[ServerProcess] = (),
                              upstream_counter=None, on_round=None) -> dict[str, list[dict]]:
    """``rounds`` rounds, each visiting every target once in order; raw results per target."""
    results: dict[str, list[dict]] = {target.name: [] for target in targets}
    for round_index in range(rounds):
        for target in targets:
            result = await measure_round(target=target, scenario=scenario, model=model,
                                         duration=duration, warmup=warmup,
                                         load_servers=load_servers,
                                         upstream_counter=upstream_counter)
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


_RATIOS = {"rps_ratio": "rps", "chunks_per_s_ratio": "chunks_per_s"}
_ADDED = {"added_p50_ms": "latency_p50_ms", "added_p90_ms": "latency_p90_ms",
          "added_p99_ms": "latency_p99_ms", "added_ttft_p50_ms": "ttft_p50_ms",
          "added_ttft_p99_ms": "ttft_p99_ms"}


def compare_paired(direct_runs: list[dict], relayed_runs: list[dict]) -> dict:
    """Per-round ratio and difference against the direct run of the same round; medians."""
    pairs = list(zip(direct_runs, relayed_runs, strict=False))
    out = {name: median_or_none([ratio(r[field], d[field]) for d, r in pairs])
           for name, field in _RATIOS.items()}
    out |= {name: median_or_none([difference(r[field], d[field]) for d, r in pairs])
            for name, field in _ADDED.items()}
    return out


def summarise_scenario(raw: dict[str, list[dict]]) -> dict:
    """Per target: raw rounds, medians and (for relays) the paired comparison with direct."""
    direct = aggregate(raw[DIRECT])
    summary = {DIRECT: {"median": direct, "rounds": raw[DIRECT]}}
    for name, runs in raw.items():
        if name == DIRECT:
            continue
        summary[name] = {"median": aggregate(runs),
                         "vs_direct": compare_paired(raw[DIRECT], runs), "rounds": runs}
    return summary
