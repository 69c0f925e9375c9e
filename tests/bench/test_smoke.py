"""The benchmark's measuring path end to end, without a gateway: fake upstream + loadgen.

Two targets that are both the fake upstream stand in for "direct" and "a relay", so the
rounds, comparison, target evaluation and report writers run on real measurements.
"""

from __future__ import annotations

import orjson
import pytest

from bench.fake_upstream import FakeEngineConfig, serve
from bench.loadgen import Scenario, run_load
from bench.report import write_results
from bench.rounds import DIRECT, Target, measure_interleaved, summarise_scenario
from bench.targets import evaluate

STREAM_TOKENS = 64


@pytest.fixture
async def upstream_url():
    server = await serve(host="127.0.0.1", port=0, config=FakeEngineConfig(model="fake-model"))
    port = server.sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    server.close()
    await server.wait_closed()


async def test_streams_deliver_exactly_the_chunks_asked_for(upstream_url):
    scenario = Scenario(stream=True, max_tokens=STREAM_TOKENS, concurrency=4)
    result = await run_load(base_url=upstream_url, model="fake-model", scenario=scenario,
                            duration=0.3, warmup=0.05)
    assert result.errors == 0, result.error_kinds
    assert result.requests > 0
    assert result.chunks_per_stream_min == result.chunks_per_stream_max == STREAM_TOKENS
    assert result.chunks == result.requests * STREAM_TOKENS
    assert 0 < result.ttft_p50_ms <= result.latency_p50_ms
    assert result.latency_p50_ms <= result.latency_p90_ms <= result.latency_p99_ms


async def test_non_streaming_requests_succeed_without_stream_figures(upstream_url):
    scenario = Scenario(stream=False, max_tokens=16, concurrency=2, path="/v1/completions")
    result = await run_load(base_url=upstream_url, model="fake-model", scenario=scenario,
                            duration=0.2, warmup=0)
    assert result.errors == 0 and result.requests > 0
    assert result.rps == pytest.approx(result.requests / result.elapsed_s)
    assert result.ttft_p50_ms is None and result.chunks == 0


async def test_wrong_model_is_counted_as_errors_not_successes(upstream_url):
    scenario = Scenario(stream=True, max_tokens=8, concurrency=1)
    result = await run_load(base_url=upstream_url, model="no-such-model", scenario=scenario,
                            duration=0.1, warmup=0)
    assert result.requests == 0
    assert result.errors > 0 and set(result.error_kinds) == {"http_404"}


async def test_interleaved_rounds_produce_the_reported_structure(upstream_url, tmp_path):
    targets = [Target(DIRECT, upstream_url), Target("off", upstream_url)]
    scenarios = {}
    for scenario in (Scenario(stream=False, max_tokens=16, concurrency=1),
                     Scenario(stream=True, max_tokens=STREAM_TOKENS, concurrency=1)):
        order = []
        raw = await measure_interleaved(targets=targets, scenario=scenario, model="fake-model",
                                        rounds=2, duration=0.1, warmup=0,
                                        on_round=lambda i, name, _, order=order: order.append((i, name)))
        assert order == [(0, DIRECT), (0, "off"), (1, DIRECT), (1, "off")]
        scenarios[scenario.key] = {"scenario": {**scenario.__dict__, "mode": scenario.mode},
                                   "targets": summarise_scenario(raw)}

    stream = scenarios["stream-c1"]["targets"]
    assert stream["off"]["median"]["rounds"] == 2
    assert len(stream["off"]["rounds"]) == 2
    assert stream["off"]["vs_direct"]["chunks_per_s_ratio"] > 0
    assert stream["off"]["vs_direct"]["added_ttft_p50_ms"] is not None
    assert scenarios["nonstream-c1"]["targets"]["off"]["vs_direct"]["rps_ratio"] > 0

    results = {
        "machine": {"when": "now", "cpu_model": "test", "cpu_count": 2, "python": "3",
                    "git_commit": "abc", "git_dirty": False},
        "niceness": 0, "pinning": "not pinned", "loadavg_start": "0", "loadavg_end": "0",
        "config": {"rounds": 2, "duration": 0.1, "warmup": 0, "nonstream_tokens": 16,
                   "stream_tokens": STREAM_TOKENS, "memory_streams": 0},
        "variants": {"off": {"status": "ok"}, "sqlite": {"status": "failed", "error": "boom"}},
        "scenarios": scenarios, "memory": {}, "engine": {"skipped": "test"},
    }
    results["targets"] = evaluate(results, ["off", "sqlite"])
    by_label = {row["target"]: row for row in results["targets"]}
    c1_p50 = by_label["Non-streaming c1: added latency p50 <= 0.6 ms"]
    assert c1_p50["figure"] == scenarios["nonstream-c1"]["targets"]["off"]["vs_direct"][
        "added_p50_ms"]
    assert c1_p50["passed"] is (c1_p50["figure"] <= 0.6)
    assert by_label["Memory <= 64 KiB per open stream"]["figure"] is None

    write_results(results, tmp_path)
    saved = orjson.loads((tmp_path / "results.json").read_bytes())
    assert saved["scenarios"]["stream-c1"]["targets"]["off"]["median"]["chunks"] > 0
    markdown = (tmp_path / "results.md").read_text()
    assert "| stream-c1 | plain relay |" in markdown
    assert "sessions, SQLite (sqlite) failed:" in markdown
    assert (tmp_path / "results.png").read_bytes().startswith(b"\x89PNG")
