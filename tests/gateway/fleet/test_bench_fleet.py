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
                      'gateway_engine_continuations_total{engine="a",outcome="diverged_continued"}': 1.0,
                      'gateway_engine_continuations_total{engine="none",outcome="no_engine"}': 1.0})},
        "routing_cost": {"1 engine": 8.0, "2 engines": 16.0},
    }
    bench.write_report(results)
    text = (tmp_path / "fleet.md").read_text()
    assert "| prefix | 50.0% | 10.0 ms | 20.0 ms | - | 900 | n/a | 0 | 10.0% |" in text
    assert "prefix / round robin: hit rate 2.00x, TTFT p50 0.50x." in text
    # 4 streams cut: 3 switched to another engine (one of them then diverged and could not go on,
    # one diverged and went on from what was sent), 1 found no engine.
    assert "| one engine killed | 4 | 1 | 4 | 2 | 1 | 1 | 1 | 2 | 0 of 4 |" in text
    assert "| clean, again | 4 | 0 | - | - | - | - | - | - | 1 of 4 |" in text
    assert "| 2 engines | 16.0 us |" in text


def test_a_scarce_kv_cache_holds_its_share_of_the_conversations_in_flight_in_whole_blocks():
    workload = bench.Workload("scarce-kv", system_sentences=4, document_sentences=100, conversations=32, turns=6,
                              answer_tokens=32, concurrency=16, kv_share=0.6)
    plan = bench.kv_plan(workload, tokens_per_conversation=4_100)
    # 4,100 tokens take 33 blocks of 128 (the last one partly); 16 conversations in flight: 528 blocks.
    assert plan["blocks_per_conversation"] == 33 and plan["working_set_blocks"] == 528
    assert plan["blocks_per_engine"] == 317  # 0.6 x 528, rounded up
    # More than half of the working set (one engine's share under prefix affinity), less than all of it.
    assert plan["working_set_blocks"] / 2 < plan["blocks_per_engine"] < plan["working_set_blocks"]


def test_a_scarce_kv_cache_never_goes_below_what_the_engine_needs_to_start():
    workload = bench.Workload("scarce-kv", system_sentences=4, document_sentences=1, conversations=2, turns=1,
                              answer_tokens=8, concurrency=16, kv_share=0.6)
    plan = bench.kv_plan(workload, tokens_per_conversation=300)
    # Two conversations in flight (not 16: there are only two), 3 blocks each; but vLLM needs one
    # max_model_len request (8,192 tokens: 64 blocks) plus its null block.
    assert plan["working_set_blocks"] == 6 and plan["blocks_per_engine"] == 65


def test_the_sizing_counts_the_last_turn_with_every_earlier_answer_and_follow_up():
    workload = bench.Workload("scarce-kv", system_sentences=1, document_sentences=1, conversations=1, turns=3,
                              answer_tokens=8, concurrency=1)
    messages = bench.last_turn(workload, "salt", answer="A")
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert messages[3]["content"] == bench.follow_up(0) and messages[5]["content"] == bench.follow_up(1)
    assert messages[1]["content"] == workload.opening(0, "salt")


def test_the_report_describes_the_scarce_kv_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "RESULTS_DIR", tmp_path)
    row = {"hit_rate": 0.8, "ttft_p50_ms": 10.0, "ttft_p99_ms": 20.0, "errors": 0, "others_cpu_share": 0.1,
           "prompt_tokens_per_request": 4000.0, "preemptions": 3.0, "on_prefix_engine": 0.75}
    results = {
        "quick": False, "machine": {"when": "now", "git_commit": "abc", "cpu_model": "cpu", "cpu_count": 2},
        "plan": {"rounds": 3, "conversations": 32, "turns": 6, "concurrency": 8, "answer_tokens": 32,
                 "scarce_concurrency": 16},
        "workloads": bench.WORKLOAD_TEXT,
        "kv": {"block_tokens": 128, "tokens_per_conversation": 4100, "blocks_per_conversation": 33,
               "working_set_blocks": 528, "blocks_per_engine": 317, "share_of_working_set": 317 / 528},
        "policies": {"scarce-kv": {"prefix": row, "round_robin": {**row, "hit_rate": 0.4, "ttft_p50_ms": 40.0}}},
    }
    bench.write_report(results)
    text = (tmp_path / "fleet.md").read_text()
    assert "16 conversations at a time" in text and "need 528 blocks; each engine has 317" in text
    assert "| prefix | 80.0% | 10.0 ms | 20.0 ms | 75.0% | 4000 | 3 | 0 | 10.0% |" in text
    assert "prefix / round robin: hit rate 2.00x, TTFT p50 0.25x." in text


def test_the_share_on_the_prefixs_engine_counts_only_policies_that_route_by_prefix():
    assert bench.on_prefix_engine({"prefix": 30.0, "prefix_overflow": 10.0}) == 0.75
    assert bench.on_prefix_engine({"prefix_overflow": 4.0, "least_load": 4.0}) == 0.0
    assert bench.on_prefix_engine({"round_robin": 40.0}) is None
    before = {'gateway_routing_decisions_total{policy="prefix",reason="prefix"}': 5.0}
    after = {'gateway_routing_decisions_total{policy="prefix",reason="prefix"}': 9.0,
             'gateway_routing_decisions_total{policy="prefix",reason="prefix_overflow"}': 2.0,
             'gateway_engine_retries_total{engine="a"}': 1.0}
    assert bench.routing_decisions(before, after) == {"prefix": 4.0, "prefix_overflow": 2.0}


def test_a_merged_run_keeps_the_parts_it_did_not_measure_and_says_when_each_was_measured():
    earlier = {"machine": {"when": "monday"}, "quick": False, "plan": {"rounds": 3, "concurrency": 8},
               "policies": {"own-context": {"prefix": 1}, "scarce-kv": {"prefix": 2}}, "kv": {"blocks": 336},
               "fault": {"failed": 0}, "cpu": {"x": 1}, "routing_cost": {"1 engine": 6.0}}
    now = {"machine": {"when": "tuesday"}, "quick": False, "plan": {"rounds": 5},
           "policies": {"scarce-kv": {"prefix": 3}}, "kv": {"blocks": 340}}
    out = bench.merged(earlier, now)
    assert out["policies"] == {"own-context": {"prefix": 1}, "scarce-kv": {"prefix": 3}}
    assert out["kv"] == {"blocks": 340} and out["fault"] == {"failed": 0} and out["cpu"] == {"x": 1}
    assert out["plan"] == {"rounds": 5, "concurrency": 8}
    assert out["measured_at"] == {"policies": "monday", "fault": "monday", "cpu": "monday", "scarce": "tuesday"}
