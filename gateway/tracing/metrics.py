"""The GenAI client metrics of the semantic conventions, in Prometheus form, beside the gateway's own.

``gen_ai.client.token.usage`` and ``gen_ai.client.operation.duration`` (conventions v1.36.0
to v1.44.0 agree on both), exposed on ``/metrics`` as ``gen_ai_client_token_usage`` (a
histogram per ``gen_ai_token_type``: input, output) and
``gen_ai_client_operation_duration_seconds``, labelled by ``gen_ai_operation_name`` and
``gen_ai_request_model`` (and ``error_type`` for the duration), with the conventions' bucket
boundaries. The duration is the gateway's whole request, as the client of the engines sees
it (routing, retries, continuation included). Time to first token is the gateway's
``gateway_time_to_first_token_seconds`` (the conventions' ``gen_ai.server.time_to_first_token``
as the gateway measures it). Recorded whether tracing is on or not: a label lookup (cached)
and two or three observations per GenAI request
(``gateway.metric_updates.observing``: one call each).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram

from gateway.metric_updates import MAX_MODEL_LABELS, OTHER_MODEL, observing
from gateway.tracing.conventions import operation_of

TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
LABELS = ["gen_ai_operation_name", "gen_ai_request_model", "gen_ai_provider_name"]


class GenAIMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.tokens = Histogram("gen_ai_client_token_usage", "Tokens used per GenAI operation (input and output)",
                                [*LABELS, "gen_ai_token_type"], buckets=TOKEN_BUCKETS, registry=registry)
        self.duration = Histogram("gen_ai_client_operation_duration_seconds",
                                  "Duration of GenAI operations, the gateway's whole request",
                                  [*LABELS, "error_type"], buckets=DURATION_BUCKETS, registry=registry)
        self._children: dict[tuple, tuple] = {}
        self._models: set[str] = set()

    def observe(self, path: str, model: object, usage: dict | None, seconds: float, error: str | None) -> None:
        operation = operation_of(path)
        if operation is None:
            return
        key = (operation, model if isinstance(model, str) else "", error or "")
        children = self._children.get(key)
        if children is None:
            if key[1] not in self._models:  # past MAX_MODEL_LABELS names, "other"
                if len(self._models) >= MAX_MODEL_LABELS:
                    key = (operation, OTHER_MODEL, key[2])
                else:
                    self._models.add(key[1])
            children = self._children.get(key)
        if children is None:
            labels = (operation, key[1], "vllm")
            children = self._children[key] = (observing(self.tokens.labels(*labels, "input")),
                                              observing(self.tokens.labels(*labels, "output")),
                                              observing(self.duration.labels(*labels, key[2])))
        source, output, duration = children
        duration(seconds)
        if isinstance(usage, dict):
            tokens = usage.get("prompt_tokens", usage.get("input_tokens"))
            if isinstance(tokens, int) and tokens > 0:
                source(tokens)
            tokens = usage.get("completion_tokens", usage.get("output_tokens"))
            if isinstance(tokens, int) and tokens > 0:
                output(tokens)
