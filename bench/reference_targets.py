"""Issue 23's targets: the gateway against the bare aiohttp relay (the Python floor), same run.

Each target compares one figure of a server under test with the same figure of the bare relay,
round by round: round r of the gateway is measured next to round r of the bare relay (and of
the direct run both are paired with), so a disturbance that slows a whole round moves both.
The comparison is taken per round, then the median across rounds is reported with the
lowest and highest round (the spread). A figure with no meaningful ratio in a round (a
non-positive added time of the reference) leaves that round out.

The same comparisons against nginx (``bench/nginx.py``) say how far each server is from a
compiled relay; they have no bound.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.rounds import DIRECT
from bench.stats import difference, median_or_none, ratio

BARE_RELAY = "bare-relay"
NGINX = "nginx"


@dataclass(frozen=True)
class RelativeTarget:
    """One figure of a server compared with the same figure of a reference, and its bound."""

    label: str
    scenario: str
    field: str
    per_round: str  # "vs_direct_ratio", "vs_direct_added" (paired with direct) or "raw"
    compare: str  # "ratio": figure / reference's; "difference": figure - reference's
    bound: float
    at_most: bool  # True: the comparison must be <= bound; False: >= bound
    unit: str  # of the figure itself


TARGETS = (
    RelativeTarget("Non-streamed c32 throughput (vs direct) >= 0.9x the bare relay's", "nonstream-c32",
                   "rps", "vs_direct_ratio", "ratio", 0.9, False, "x direct"),
    RelativeTarget("CPU per non-streamed request (c32) <= 1.3x the bare relay's", "nonstream-c32",
                   "server_cpu_us_per_request", "raw", "ratio", 1.3, True, " us"),
    RelativeTarget("Non-streamed c1 added p50 <= the bare relay's + 0.15 ms", "nonstream-c1",
                   "latency_p50_ms", "vs_direct_added", "difference", 0.15, True, " ms"),
    RelativeTarget("CPU per streamed request (c32) <= 1.1x the bare relay's", "stream-c32",
                   "server_cpu_us_per_request", "raw", "ratio", 1.1, True, " us"),
    RelativeTarget("Streamed TTFT p99 added at c32 <= 1.5x the bare relay's", "stream-c32",
                   "ttft_p99_ms", "vs_direct_added", "ratio", 1.5, True, " ms"),
)


def per_round_figures(block: dict, name: str, target: RelativeTarget) -> list[float | None]:
    """The target's figure for ``name`` in each round of one scenario's results."""
    runs = (block.get(name) or {}).get("rounds") or []
    direct = (block.get(DIRECT) or {}).get("rounds") or []
    if target.per_round == "raw":
        return [run.get(target.field) for run in runs]
    pairs = zip(direct, runs, strict=False)
    if target.per_round == "vs_direct_ratio":
        return [ratio(run.get(target.field), d.get(target.field)) for d, run in pairs]
    return [difference(run.get(target.field), d.get(target.field)) for d, run in pairs]


def _compare(target: RelativeTarget, figure: float | None, reference: float | None) -> float | None:
    if figure is None or reference is None:
        return None
    if target.compare == "difference":
        return figure - reference
    if target.per_round == "vs_direct_added" and reference <= 0:
        return None  # "1.5x an added time" means nothing when the reference added none
    return ratio(figure, reference)


def compare_rounds(block: dict, name: str, reference: str, target: RelativeTarget) -> dict:
    """Per-round comparison of ``name`` with ``reference``: median, lowest, highest, rounds used."""
    mine = per_round_figures(block, name, target)
    theirs = per_round_figures(block, reference, target)
    values = [v for v in (_compare(target, a, b) for a, b in zip(mine, theirs, strict=False))
              if v is not None]
    return {"median": median_or_none(values), "low": min(values) if values else None,
            "high": max(values) if values else None, "rounds": len(values)}


def passes(target: RelativeTarget, comparison: float | None) -> bool | None:
    if comparison is None:
        return None
    return comparison <= target.bound if target.at_most else comparison >= target.bound


def evaluate_relative(results: dict, names: list[str]) -> list[dict]:
    """Every target: per server, its figure (median of rounds), and its comparison with the
    bare relay (judged against the bound) and with nginx (no bound)."""
    rows = []
    for target in TARGETS:
        block = results.get("scenarios", {}).get(target.scenario, {}).get("targets", {})
        by_name = {}
        for name in names:
            if name not in block:
                continue
            figures = per_round_figures(block, name, target)
            vs_bare = compare_rounds(block, name, BARE_RELAY, target) if name != BARE_RELAY else None
            by_name[name] = {
                "figure": median_or_none(figures),
                "vs_bare_relay": vs_bare,
                "passed": None if vs_bare is None else passes(target, vs_bare["median"]),
                "vs_nginx": compare_rounds(block, name, NGINX, target)
                if name != NGINX and NGINX in block else None,
            }
        rows.append({"target": target.label, "scenario": target.scenario, "bound": target.bound,
                     "compare": target.compare, "at_most": target.at_most, "unit": target.unit,
                     "by_name": by_name})
    return rows
