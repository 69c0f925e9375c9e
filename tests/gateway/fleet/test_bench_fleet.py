"""bench/fleet.py's own arithmetic and report: what the published figures are computed from."""

from __future__ import annotations

from bench import fleet as bench


def test_the_hit_rate_is_the_change_of_hits_over_the_change_of_queries_summed_over_the_engines():
    before = [{"vllm:prefix_cache_hits_total": 100, "vllm:prefix_cache_queries_total": 1000,
               "vllm:request_success_total": 5},
              {"vllm:prefix_cache_hits_total": 0, "vllm:prefix_cache_queries_total": 0}]
    after = [{"vllm:prefix_cache_hits_total": 356, "vllm:prefix_cache_queries_total": 1512,
              "vllm:request_success_total": 9},
             {"vllm:prefix_cache_hits_total": 128, "vllm:prefix_cache_queries_total": 488,
              "vllm:request_success_total": 3}]
    rate, served = bench.hit_rate(before, after)
    assert rate == (256 + 128) / (512 + 488) and served == [4, 3]


def test_every_run_and_every_conversation_has_its_own_prompt_but_one_run_shares_its_system_prompt():
    workload = bench.Workload("own-context", system_sentences=4, document_sentences=3, conversations=2, turns=2,
                              answer_tokens=8, concurrency=1)
    assert workload.system("run-a") != workload.system("run-b")
    assert workload.opening(0, "run-a") != workload.opening(1, "run-a") != workload.opening(0, "run-b")
    assert workload.opening(0, "run-a") == workload.opening(0, "run-a")


def test_counter_deltas_select_by_name_and_outcome():
    before = {'gateway_engine_continuations_total{engine="b",outcome="continued"}': 1.0}
    after = {'gateway_engine_continuations_total{engine="b",outcome="continued"}': 4.0,
             'gateway_engine_continuations_total{engine="none",outcome="no_engine"}': 1.0,
             'gateway_engine_retries_total{engine="a"}': 7.0}
    assert bench.counter_delta(before, after, "gateway_engine_continuations_total", "continued") == 3
    assert bench.counter_delta(before, after, "gateway_engine_continuations_total") == 4
    assert bench.counter_delta(before, after, "gateway_engine_retries_total") == 7


def test_the_report_shows_each_part(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "RESULTS_DIR", tmp_path)
    row = {"hit_rate": 0.5, "ttft_p50_ms": 10.0, "ttft_p99_ms": 20.0, "errors": 0, "others_cpu_share": 0.1,
           "prompt_tokens_per_request": 900.0}
    results = {
        "quick": True, "machine": {"when": "now", "git_commit": "abc", "cpu_model": "cpu", "cpu_count": 2},
        "plan": {"rounds": 1, "conversations": 2, "turns": 2, "concurrency": 1, "answer_tokens": 8},
        "workloads": bench.WORKLOAD_TEXT,
        "policies": {"shared-system": {"prefix": row, "round_robin": {**row, "hit_rate": 0.25,
                                                                     "ttft_p50_ms": 20.0}}},
        "fault": {"killed_after_requests": 2, "requests": 4, "failed": 1, "retried_before_first_byte": 2,
                  "answers_differing_from_reference": 0, "answers_compared": 4, "clean_runs_failed": 0,
                  "clean_answers_differing": 1,
                  **bench.stream_outcomes({}, {
                      'gateway_engine_continuations_total{engine="b",outcome="continued"}': 3.0,
                      'gateway_engine_continuations_total{engine="b",outcome="diverged"}': 1.0,
                      'gateway_engine_continuations_total{engine="none",outcome="no_engine"}': 1.0})},
        "routing_cost": {"1 engine": 8.0, "2 engines": 16.0},
    }
    bench.write_report(results)
    text = (tmp_path / "fleet.md").read_text()
    assert "| prefix | 50.0% | 10.0 ms | 20.0 ms | 900 | 0 | 10.0% |" in text
    assert "prefix / round robin: hit rate 2.00x, TTFT p50 0.50x." in text
    # 4 streams cut: 3 switched to another engine (one of them then diverged), 1 found no engine.
    assert "| one engine killed | 4 | 1 | 4 | 2 | 1 | 1 | 2 | 0 of 4 |" in text
    assert "| clean, again | 4 | 0 | - | - | - | - | - | 1 of 4 |" in text
    assert "| 2 engines | 16.0 us |" in text
