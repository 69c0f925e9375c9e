"""The flow-control benchmark's smoke run: every figure is produced and the simulation meets its targets.

Real runs (more requests, more rounds) are in bench/results/flow.md; this keeps the harness from rotting.
"""

from __future__ import annotations

import json

from bench import flow


def test_a_quick_run_measures_every_path_and_simulates_the_targets(tmp_path):
    report = flow.main(["--quick", "--output", str(tmp_path)])
    assert set(report["cost"]["us_per_request"]) == {"queue-less", "flow, no contention", "flow, queued"}
    assert all(value > 0 for value in report["cost"]["us_per_request"].values())
    fairness = report["fairness"]
    assert fairness["ratio"] <= 1.5 and fairness["jain_index"] >= 0.9
    assert report["aging"]["within_bound"]
    priority = report["priority"]
    assert priority["interactive"]["p50_wait_s"] < priority["batch"]["p50_wait_s"]
    assert json.loads((tmp_path / "flow.json").read_text())["fairness"] == fairness
    assert "| flow, no contention |" in (tmp_path / "flow.md").read_text()
