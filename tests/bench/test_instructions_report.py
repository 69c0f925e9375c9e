"""bench.instructions' report: ratios against the bare relay, and figures with failed requests marked."""

from __future__ import annotations

from bench.instructions import report


def test_ratios_are_against_the_bare_relay_and_failed_requests_are_named():
    results = {"bare-relay": {"stream": {"completed": 8, "instructions_per_request": 2e6}},
               "sqlite": {"stream": {"completed": 6, "instructions_per_request": 3e6}}}
    text = report(results, requests=8, concurrency=4)
    assert "| sqlite | - | - | 3.00 | 1.50x |" in text
    assert "**Not comparable, requests failed:** sqlite stream (2 of 8)" in text
    assert "Not comparable" not in report({"bare-relay": results["bare-relay"]}, requests=8, concurrency=4)
