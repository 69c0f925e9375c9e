"""Issue 7's targets, checked against a run's results (plain relay unless a target says)."""

from __future__ import annotations

from dataclasses import dataclass

KIB = 1024


@dataclass(frozen=True)
class TargetSpec:
    """One target: where its figure lives in the results, and the bound it must meet."""

    label: str
    variant: str  # the variant the issue states the target for
    kind: str  # "scenario", "memory" or "engine"
    scenario: str | None
    field: str
    bound: float
    at_most: bool  # True: figure <= bound passes; False: figure >= bound passes
    unit: str = ""


TARGETS = (
    TargetSpec("Non-streaming c1: added latency p50 <= 0.6 ms", "off", "scenario",
               "nonstream-c1", "added_p50_ms", 0.6, True, " ms"),
    TargetSpec("Non-streaming c1: added latency p99 <= 2 ms", "off", "scenario",
               "nonstream-c1", "added_p99_ms", 2.0, True, " ms"),
    TargetSpec("Non-streaming c32: throughput >= 0.75x direct", "off", "scenario",
               "nonstream-c32", "rps_ratio", 0.75, False, "x"),
    TargetSpec("Streaming c1: added TTFT p50 <= 1 ms", "off", "scenario",
               "stream-c1", "added_ttft_p50_ms", 1.0, True, " ms"),
    TargetSpec("Streaming c1: chunks/s >= 0.6x direct", "off", "scenario",
               "stream-c1", "chunks_per_s_ratio", 0.6, False, "x"),
    TargetSpec("Streaming c32: chunks/s >= 0.6x direct (plain relay)", "off", "scenario",
               "stream-c32", "chunks_per_s_ratio", 0.6, False, "x"),
    TargetSpec("Streaming c32: chunks/s >= 0.5x direct (sessions persisted to SQLite)",
               "sqlite", "scenario", "stream-c32", "chunks_per_s_ratio", 0.5, False, "x"),
    TargetSpec("1,000 concurrent streams: no errors", "off", "memory", None, "errors", 0, True),
    TargetSpec("Memory <= 64 KiB per open stream", "off", "memory", None,
               "kib_per_stream", 64, True, " KiB"),
    TargetSpec("Real engine end to end: throughput >= 0.97x direct", "off", "engine", None,
               "rps_ratio", 0.97, False, "x"),
)


def _figure(results: dict, spec: TargetSpec, variant: str) -> float | None:
    if spec.kind == "scenario":
        block = results.get("scenarios", {}).get(spec.scenario, {}).get("targets", {})
        return (block.get(variant) or {}).get("vs_direct", {}).get(spec.field)
    if spec.kind == "memory":
        memory = results.get("memory", {}).get(variant) or {}
        if spec.field == "kib_per_stream":
            per_stream = memory.get("bytes_per_stream")
            return None if per_stream is None else per_stream / KIB
        return memory.get(spec.field)
    if spec.kind == "engine":
        engine = results.get("engine", {}).get("variants", {}).get(variant) or {}
        figures = [s.get(spec.field) for s in engine.get("by_scenario", {}).values()]
        figures = [f for f in figures if f is not None]
        return min(figures) if figures else None
    return None


def evaluate(results: dict, variants: list[str]) -> list[dict]:
    """Every target, with its figure for each variant and pass/fail for its own variant."""
    rows = []
    for spec in TARGETS:
        figures = {variant: _figure(results, spec, variant) for variant in variants}
        figure = figures.get(spec.variant)
        passed = None if figure is None else (
            figure <= spec.bound if spec.at_most else figure >= spec.bound)
        rows.append({"target": spec.label, "variant": spec.variant, "bound": spec.bound,
                     "unit": spec.unit, "figure": figure, "passed": passed,
                     "by_variant": figures,
                     "passed_by_variant": {
                         v: None if f is None else (f <= spec.bound if spec.at_most
                                                    else f >= spec.bound)
                         for v, f in figures.items()}})
    return rows
