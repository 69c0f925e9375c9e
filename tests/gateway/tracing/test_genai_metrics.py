"""The GenAI client metrics on /metrics (tracing on or off): tokens by type and the operation's duration."""

from __future__ import annotations

from tests.support.engine import parse_prometheus


def chat(stream: bool) -> dict:
    return {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": stream}


async def test_token_usage_and_duration_per_operation_and_model(client):
    for stream in (False, True):
        response = await client.post("/v1/chat/completions", json=chat(stream))
        assert response.status_code == 200
    await client.post("/v1/completions", json={"model": "fake-model", "prompt": "hi", "max_tokens": 3})
    text = (await client.get("/metrics")).text
    samples = parse_prometheus(text)
    labels = 'gen_ai_operation_name="chat",gen_ai_provider_name="vllm",gen_ai_request_model="fake-model"'
    assert f'gen_ai_client_token_usage_sum{{{labels},gen_ai_token_type="input"}} 10.0' in text  # 5 per call
    assert f'gen_ai_client_token_usage_sum{{{labels},gen_ai_token_type="output"}} 8.0' in text
    # Buckets are cumulative and their bounds inclusive: 5 input tokens fall under 16, 4 output under 4.
    assert f'gen_ai_client_token_usage_bucket{{{labels},gen_ai_token_type="input",le="4.0"}} 0.0' in text
    assert f'gen_ai_client_token_usage_bucket{{{labels},gen_ai_token_type="input",le="16.0"}} 2.0' in text
    assert f'gen_ai_client_token_usage_bucket{{{labels},gen_ai_token_type="output",le="1.0"}} 0.0' in text
    assert f'gen_ai_client_token_usage_bucket{{{labels},gen_ai_token_type="output",le="4.0"}} 2.0' in text
    assert f'gen_ai_client_operation_duration_seconds_bucket{{error_type="",{labels},le="+Inf"}} 2.0' in text
    assert f'gen_ai_client_operation_duration_seconds_count{{error_type="",{labels}}} 2.0' in text
    assert 'gen_ai_operation_name="text_completion"' in text
    assert samples["gen_ai_client_operation_duration_seconds_count"] == 3


def test_past_the_model_bound_a_model_is_counted_as_other():
    """The model label is bounded as the gateway's own model labels are: the first
    ``MAX_MODEL_LABELS`` names, then ``other`` (a feature's call may name any model)."""
    from prometheus_client import CollectorRegistry

    from gateway.metric_updates import MAX_MODEL_LABELS, OTHER_MODEL
    from gateway.tracing.metrics import GenAIMetrics

    registry = CollectorRegistry()
    metrics = GenAIMetrics(registry)
    for index in range(MAX_MODEL_LABELS + 10):
        metrics.observe("/v1/completions", f"model-{index}", {"prompt_tokens": 2, "completion_tokens": 3}, 0.1, None)
    metrics.observe("/v1/completions", "model-0", None, 0.1, None)  # a model seen before keeps its own series
    models = {sample.labels["gen_ai_request_model"] for family in registry.collect() for sample in family.samples
              if family.name == "gen_ai_client_operation_duration_seconds"}
    assert len(models) == MAX_MODEL_LABELS + 1 and OTHER_MODEL in models
    labels = {"gen_ai_operation_name": "text_completion", "gen_ai_provider_name": "vllm", "error_type": ""}
    count = "gen_ai_client_operation_duration_seconds_count"
    assert registry.get_sample_value(count, {**labels, "gen_ai_request_model": OTHER_MODEL}) == 10
    assert registry.get_sample_value(count, {**labels, "gen_ai_request_model": "model-0"}) == 2
