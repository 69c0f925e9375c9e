"""The request path's shortcuts into prometheus_client (``counting``, ``observing``) count what its own calls count."""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from gateway.http.metrics import LATENCY_BUCKETS, Metrics
from gateway.metric_updates import counting, observing

AMOUNTS = [0.0, 0.0001, 0.0005, 0.00050001, 0.001, 0.3, 1, 2.5, 59.9, 60, 119, 120, 121, 1e9, -1.0, math.nan]


def _pair(kind, **kwargs):
    """The same metric on two registries: one fed through the shortcut, one through prometheus_client."""
    registries = CollectorRegistry(), CollectorRegistry()
    return registries, [kind("m", "help", ["l"], registry=r, **kwargs).labels("a") for r in registries]


def _exposition(registry: CollectorRegistry) -> list[str]:
    return [line for line in generate_latest(registry).decode().splitlines() if "_created" not in line]


def test_observing_fills_the_same_buckets_and_sum_as_observe():
    (fast_registry, slow_registry), (fast, slow) = _pair(Histogram, buckets=LATENCY_BUCKETS)
    observe = observing(fast)
    for amount in AMOUNTS:
        observe(amount)
        slow.observe(amount)
    assert _exposition(fast_registry) == _exposition(slow_registry)


def test_counting_adds_like_inc():
    (fast_registry, slow_registry), (fast, slow) = _pair(Counter)
    inc = counting(fast)
    for amount in (1, 1, 7, 0.5):
        inc(amount)
        slow.inc(amount)
    assert _exposition(fast_registry) == _exposition(slow_registry)
    assert 'm_total{l="a"} 9.5' in _exposition(fast_registry)


def test_shortcuts_fall_back_to_the_public_calls_when_the_internals_are_not_there():
    class Child:
        def __init__(self):
            self.seen = []

        def inc(self, amount=1):
            self.seen.append(("inc", amount))

        def observe(self, amount):
            self.seen.append(("observe", amount))

    child = Child()
    counting(child)(2)
    observing(child)(0.5)
    assert child.seen == [("inc", 2), ("observe", 0.5)]


def test_count_usage_keeps_prometheus_clients_refusal_of_a_negative_count():
    metrics = Metrics()
    metrics.count_usage("key1", {"prompt_tokens": 3, "completion_tokens": 4})
    try:
        metrics.count_usage("key1", {"prompt_tokens": -2})
    except ValueError:
        refused = True
    else:
        refused = False
    assert refused
    text = metrics.render().decode()
    assert 'gateway_tokens_total{key_id="key1",kind="prompt"} 3.0' in text
    assert 'gateway_tokens_total{key_id="key1",kind="completion"} 4.0' in text


def test_observe_request_and_overhead_reach_the_exposition():
    metrics = Metrics()
    metrics.observe_request("/v1/chat/completions", 200, 0.003)
    metrics.observe_request("/v1/chat/completions", 200, 0.2)
    metrics.observe_overhead(0.0003)
    text = metrics.render().decode()
    assert 'gateway_requests_total{route="/v1/chat/completions",status="200"} 2.0' in text
    assert 'gateway_request_duration_seconds_bucket{le="0.005",route="/v1/chat/completions"} 1.0' in text
    assert 'gateway_request_duration_seconds_bucket{le="0.25",route="/v1/chat/completions"} 2.0' in text
    assert 'gateway_request_duration_seconds_count{route="/v1/chat/completions"} 2.0' in text
    assert 'gateway_added_seconds_bucket{le="0.0005"} 1.0' in text
    assert 'gateway_added_seconds_bucket{le="0.00025"} 0.0' in text
