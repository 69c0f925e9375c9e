"""The engine probe sums vLLM's finished-request counter over every finish reason."""

from __future__ import annotations

from bench.engine_probe import parse_finished

METRICS = b"""# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 19.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 12885.0
vllm:request_success_total{engine="0",finished_reason="abort",model_name="m"} 3.0
vllm:request_success_created{engine="0",finished_reason="stop",model_name="m"} 1.7e9
vllm:num_requests_running{engine="0",model_name="m"} 2.0
"""


def test_sums_every_finish_reason_and_nothing_else():
    assert parse_finished(METRICS) == 19 + 12885 + 3


def test_no_counter_means_zero():
    assert parse_finished(b"vllm:num_requests_running 1.0\n") == 0
