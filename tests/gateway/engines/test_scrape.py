"""Reading an engine's load from its /metrics text: vLLM 0.32's names, the older ones, data-parallel ranks."""

from __future__ import annotations

from gateway.engines.scrape import Load, parse_load

# Trimmed from a live vLLM 0.32 CPU engine (docs: notes on the fleet), HELP/TYPE lines and all.
VLLM_032 = b"""# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="qwen3-embedded"} 6.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="qwen3-embedded"} 2.0
vllm:num_requests_waiting_by_reason{engine="0",model_name="qwen3-embedded",reason="capacity"} 2.0
vllm:kv_cache_usage_perc{engine="0",model_name="qwen3-embedded"} 0.0014
vllm:prefix_cache_queries_total{engine="0",model_name="qwen3-embedded"} 2075.0
vllm:prefix_cache_queries_created{engine="0",model_name="qwen3-embedded"} 1.7961598e+09
vllm:prefix_cache_hits_total{engine="0",model_name="qwen3-embedded"} 640.0
vllm:external_prefix_cache_hits_total{engine="0",model_name="qwen3-embedded"} 99.0
http_requests_total{handler="/v1/chat/completions",method="POST",status="2xx"} 7.0
"""


def test_reads_the_current_names():
    assert parse_load(VLLM_032) == Load(running=6.0, waiting=2.0, kv_cache_usage=0.0014,
                                        prefix_cache_hits=640.0, prefix_cache_queries=2075.0)


def test_reads_the_names_of_older_releases():
    older = b"""vllm:num_requests_running{model_name="m"} 1.0
vllm:num_requests_waiting{model_name="m"} 0.0
vllm:gpu_cache_usage_perc{model_name="m"} 0.5
vllm:gpu_prefix_cache_queries_total{model_name="m"} 300.0
vllm:gpu_prefix_cache_hits_total{model_name="m"} 100.0
"""
    assert parse_load(older) == Load(running=1.0, waiting=0.0, kv_cache_usage=0.5, prefix_cache_hits=100.0,
                                     prefix_cache_queries=300.0)


def test_the_current_name_wins_when_an_engine_exposes_both():
    both = b"""vllm:gpu_prefix_cache_hits_total{model_name="m"} 7.0
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 128.0
vllm:gpu_cache_usage_perc{model_name="m"} 0.9
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
"""
    load = parse_load(both)
    assert (load.prefix_cache_hits, load.kv_cache_usage) == (128.0, 0.25)


def test_data_parallel_ranks_are_summed_and_kv_usage_is_the_busiest_rank():
    ranks = b"""vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 4.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.2
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.7
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 128.0
vllm:prefix_cache_hits_total{engine="1",model_name="m"} 256.0
"""
    load = parse_load(ranks)
    assert (load.running, load.kv_cache_usage, load.prefix_cache_hits) == (7.0, 0.7, 384.0)


def test_missing_families_and_garbage_lines_read_as_nothing():
    assert parse_load(b"not metrics at all\nvllm:num_requests_running{x=\"1\"} NaNish\n") == Load()
