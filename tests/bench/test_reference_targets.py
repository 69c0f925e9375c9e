"""bench/reference_targets.py: issue 23's targets, judged round by round against the bare relay.

The figures are made up so that each expected comparison can be worked out by hand.
"""

from __future__ import annotations

import pytest

from bench.reference_targets import BARE_RELAY, NGINX, evaluate_relative
from bench.report import render_markdown


# Binary fractions where a bound is met exactly or nearly, so no rounding decides a verdict.
def _rounds(**by_field: list[float | None]) -> list[dict]:
    count = len(next(iter(by_field.values())))
    return [{field: values[i] for field, values in by_field.items()} for i in range(count)]


def _results() -> dict:
    nonstream_c32 = {
        "direct": {"rounds": _rounds(rps=[1024, 1024, 1024])},
        BARE_RELAY: {"rounds": _rounds(rps=[512, 512, 1024], server_cpu_us_per_request=[100, 100, 100])},
        "sqlite": {"rounds": _rounds(rps=[480, 512, 768], server_cpu_us_per_request=[150, 120, 140])},
        NGINX: {"rounds": _rounds(rps=[1024, 768, 1024], server_cpu_us_per_request=[20, 25, 20])},
    }
    nonstream_c1 = {
        "direct": {"rounds": _rounds(latency_p50_ms=[0.25, 0.25])},
        BARE_RELAY: {"rounds": _rounds(latency_p50_ms=[0.5, 0.75])},
        "sqlite": {"rounds": _rounds(latency_p50_ms=[0.5, 0.875])},
    }
    stream_c32 = {
        "direct": {"rounds": _rounds(ttft_p99_ms=[10, 10, 10])},
        # The bare relay added 10, 0 (no ratio: the round is left out) and 20 ms.
        BARE_RELAY: {"rounds": _rounds(ttft_p99_ms=[20, 10, 30], server_cpu_us_per_request=[1000, 1000, 1000])},
        "sqlite": {"rounds": _rounds(ttft_p99_ms=[25, 40, 40], server_cpu_us_per_request=[1050, 1200, 1100])},
    }
    return {"scenarios": {"nonstream-c32": {"targets": nonstream_c32},
                          "nonstream-c1": {"targets": nonstream_c1},
                          "stream-c32": {"targets": stream_c32}}}


def _rows(results: dict) -> dict[str, dict]:
    return {row["target"].split(" (")[0].split(" <=")[0].split(" >=")[0]: row
            for row in evaluate_relative(results, ["sqlite", BARE_RELAY, NGINX])}


def test_each_target_is_compared_round_by_round_with_median_and_spread():
    rows = _rows(_results())

    throughput = rows["Non-streamed c32 throughput"]["by_name"]["sqlite"]
    # per round: 480/512 = 0.9375, 512/512 = 1.0, 768/1024 = 0.75
    assert throughput["vs_bare_relay"]["median"] == pytest.approx(0.9375)
    assert (throughput["vs_bare_relay"]["low"], throughput["vs_bare_relay"]["high"]) == pytest.approx((0.75, 1.0))
    assert throughput["figure"] == pytest.approx(0.5)  # the median of 0.47, 0.5, 0.75 direct
    assert throughput["passed"] is True

    cpu = rows["CPU per non-streamed request"]["by_name"]["sqlite"]
    assert cpu["vs_bare_relay"]["median"] == pytest.approx(1.4)  # 1.5, 1.2, 1.4
    assert cpu["passed"] is False
    # against nginx: 150/20, 120/25, 140/20
    assert cpu["vs_nginx"]["median"] == pytest.approx(7.0)

    latency = rows["Non-streamed c1 added p50"]["by_name"]["sqlite"]
    assert latency["vs_bare_relay"]["median"] == pytest.approx(0.0625)  # +0 and +0.125 ms
    assert latency["passed"] is True  # at most the bare relay's + 0.15 ms

    streamed_cpu = rows["CPU per streamed request"]["by_name"]["sqlite"]
    assert streamed_cpu["vs_bare_relay"]["median"] == pytest.approx(1.1)
    assert streamed_cpu["passed"] is True


def test_a_round_where_the_reference_added_nothing_gives_no_ratio():
    ttft = _rows(_results())["Streamed TTFT p99 added at c32"]["by_name"]["sqlite"]
    # added 15/10 and 30/20: the middle round (the bare relay added 0 ms) is left out
    assert ttft["vs_bare_relay"] == {"median": pytest.approx(1.5), "low": pytest.approx(1.5),
                                     "high": pytest.approx(1.5), "rounds": 2}
    assert ttft["passed"] is True
    assert ttft["vs_nginx"] is None  # nginx was not measured in this scenario


def test_the_reference_itself_is_not_judged_and_missing_scenarios_give_no_verdict():
    rows = _rows(_results())
    bare = rows["Non-streamed c32 throughput"]["by_name"][BARE_RELAY]
    assert bare["vs_bare_relay"] is None and bare["passed"] is None
    assert bare["figure"] == pytest.approx(0.5)
    results = _results()
    del results["scenarios"]["stream-c32"]
    assert _rows(results)["CPU per streamed request"]["by_name"] == {}


def test_the_report_shows_each_verdict_and_the_comparison_with_nginx():
    results = _results()
    results["relative_targets"] = evaluate_relative(results, ["sqlite", BARE_RELAY, NGINX])
    results |= {
        "machine": {"when": "now", "cpu_model": "test", "cpu_count": 2, "python": "3",
                    "git_commit": "abc", "git_dirty": False},
        "niceness": 0, "pinning": "not pinned", "loadavg_start": "0", "loadavg_end": "0",
        "config": {"rounds": 3, "duration": 1, "warmup": 0, "nonstream_tokens": 16,
                   "stream_tokens": 256, "memory_streams": 0},
        "variants": {"sqlite": {"status": "ok"}},
        "references": {BARE_RELAY: {"status": "ok"}, NGINX: {"status": "failed", "error": "no nginx"}},
        "default_variant": "sqlite", "targets": [], "memory": {}, "engine": {"skipped": "test"},
    }
    for block in results["scenarios"].values():
        block["scenario"] = {"stream": False, "mode": "nonstream"}
        for name, target in block["targets"].items():
            target["median"] = {"rps": 1, "latency_p50_ms": 1, "latency_p99_ms": 1, "errors": 0}
            if name != "direct":
                target["vs_direct"] = {}
    text = render_markdown(results)
    section = text.split("## Targets against the bare relay (issue 23)")[1].split("## Targets (issue 7)")[0]
    assert ("| Non-streamed c32 throughput (vs direct) >= 0.9x the bare relay's | "
            "**0.50x direct; 0.94x (0.75-1.00): met** | 0.50x direct |") in section
    assert "| Non-streamed c1 added p50 <= the bare relay's + 0.15 ms | **0.44 ms; +0.06 ms (+0.00 to +0.12): met**" \
        in section
    assert "**120.00 us; 1.40x (1.20-1.50): missed**" not in section  # the figure is the median, 140 us
    assert "**140.00 us; 1.40x (1.20-1.50): missed**" in section
    assert "nginx, 1 worker (reference) (nginx) failed:** `no nginx`" in text
