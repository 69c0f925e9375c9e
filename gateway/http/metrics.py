"""Prometheus metrics, on a registry owned by the app (tests build many apps).

Labels are bounded: route templates (not raw paths), status codes, key ids
(digest prefixes of configured keys, so as many as there are keys), engines (the fleet's
members; an engine that leaves the fleet has its series removed), models (the names the
engines serve: a request naming another is refused before it reaches an engine; all the same,
past ``MAX_MODEL_LABELS`` names a model is counted as ``other``), failure kinds and routing
reasons (short fixed words).

The alerting rules and the dashboard shipped in ``deploy/`` read these names
(docs/operations.md); tests/deploy checks that every name they use is defined here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

from gateway.metric_updates import MAX_MODEL_LABELS, OTHER_MODEL, counting, observing
from gateway.tracing.metrics import GenAIMetrics

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
QUEUE_WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120)
OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1)
# Time to first token: from tens of milliseconds (a short prompt, an idle engine) to a minute
# (a long prompt's prefill behind a full batch).
FIRST_TOKEN_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 7.5, 10, 20, 30, 60)


class ModelReadiness:
    """``gateway_model_engines_ready{model}``, computed at scrape time from the fleet (``Metrics.watch_models``).

    A collector rather than a gauge per model: the set of models changes with the fleet, and a
    model whose every engine is down must read 0 (not vanish), which only the fleet knows.
    """

    NAME = "gateway_model_engines_ready"
    HELP = ("Engines ready (answering health, listing the model, not ejected) per served model; "
            "0: requests for this model fail with 503")

    def __init__(self) -> None:
        self.source: Callable[[], Mapping[str, int]] | None = None

    def describe(self):
        return [GaugeMetricFamily(self.NAME, self.HELP, labels=["model"])]

    def collect(self):
        family = GaugeMetricFamily(self.NAME, self.HELP, labels=["model"])
        if self.source is not None:
            for model, ready in self.source().items():
                family.add_metric([model], ready)
        yield family


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "gateway_requests", "Requests answered, by route and status", ["route", "status"], registry=r
        )
        self.duration = Histogram(
            "gateway_request_duration_seconds",
            "Time from request start to the end of the response, by route",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.overhead = Histogram(
            "gateway_added_seconds",
            "Time the gateway itself added before the response started (excludes waiting for the engine)",
            buckets=OVERHEAD_BUCKETS,
            registry=r,
        )
        self.observe_overhead = observing(self.overhead)
        self.inflight = Gauge(
            "gateway_requests_in_flight", "Requests admitted and being served (read from admission control)", registry=r
        )
        self.rejected = Counter(
            "gateway_rejected",
            "Requests the gateway refused itself, by reason: before a route (auth, admission, body_size, cors, "
            "host), at their limits (rate_limit, budget, limits_unavailable) or by the queue (queue_full, ...)",
            ["reason"], registry=r
        )
        self.tokens = Counter(
            "gateway_tokens",
            "Tokens reported by the engine, per API key and kind (prompt/completion), aborted streams included",
            ["key_id", "kind"],
            registry=r,
        )
        self.streams_ended = Counter(
            "gateway_streams_ended",
            "Streams that ended, by how (completed, client_disconnect, cancelled, error)",
            ["how"],
            registry=r,
        )
        self.upstream_errors = Counter(
            "gateway_upstream_errors", "Failures talking to the engine, by kind", ["kind"], registry=r
        )
        self.sessions_in_memory = Gauge(
            "gateway_sessions_in_memory",
            "Generations this process keeps in memory (live ones, and finished ones not yet evicted)",
            registry=r,
        )
        self._request_children: dict[tuple[str, int], tuple] = {}
        self._ended_children: dict[str, object] = {}
        self._token_children: dict[str, tuple] = {}
        self.engine_ready = Gauge("gateway_engine_ready", "1 when an engine answers health and lists models",
                                  registry=r)
        self.first_token = Histogram(
            "gateway_time_to_first_token_seconds",
            "Streamed chat, completion and messages requests: time from sending the request to an engine "
            "(routing and retries included) to its first streamed bytes, which vLLM sends with the first "
            "token; by model (a continuation on another engine is a stream of its own)",
            ["model"], buckets=FIRST_TOKEN_BUCKETS, registry=r)
        self._first_token_children: dict[str, Histogram] = {}
        self.genai = GenAIMetrics(r)  # gen_ai_client_token_usage, gen_ai_client_operation_duration_seconds
        self.model_readiness = ModelReadiness()
        r.register(self.model_readiness)
        self.session_store_backlog = Gauge(
            "gateway_session_store_backlog_bytes",
            "Session events the store's last write could not persist (0 while writes succeed); new streams "
            "are refused with 503 beyond gateway_session_store_backlog_limit_bytes", registry=r)
        self.session_store_backlog_limit = Gauge(
            "gateway_session_store_backlog_limit_bytes", "SESSION_MAX_UNPERSISTED_BYTES", registry=r)
        # --- the engine fleet (gateway.engines) ---
        self.engine_requests = Counter(
            "gateway_engine_requests", "Requests sent to each engine (every attempt, retries included)",
            ["engine"], registry=r)
        self.engine_errors = Counter(
            "gateway_engine_errors",
            "Failed exchanges with each engine, by kind (refused, reset, disconnected, http_503, stalled, "
            "ended_early, timeout, ...)", ["engine", "kind"], registry=r)
        self.engine_retries = Counter(
            "gateway_engine_retries",
            "Requests this engine failed before their client saw anything, retried on another engine",
            ["engine"], registry=r)
        self.engine_continuations = Counter(
            "gateway_engine_continuations",
            "Streams whose engine failed mid-stream, by the engine that continued them ('none': no engine "
            "could) and outcome (continued, no_engine, refused, not_continuable; diverged_continued, diverged: a "
            "replay that produced other text went on from what was sent, or could not)",
            ["engine", "outcome"], registry=r)
        self.routing_decisions = Counter(
            "gateway_routing_decisions", "Engine choices, by routing policy and reason", ["policy", "reason"],
            registry=r)
        self.engine_up = Gauge("gateway_engine_up", "1 when the engine is ready and not ejected", ["engine"],
                               registry=r)
        self.engine_inflight = Gauge("gateway_engine_in_flight", "Requests this gateway has open on each engine",
                                     ["engine"], registry=r)
        self.engine_load = Gauge(
            "gateway_engine_load_score",
            "Each engine's routing score: running + 4 x waiting (its /metrics), plus this gateway's requests "
            "since that scrape", ["engine"], registry=r)

        # --- flow control (gateway.flow; recorded by its scheduler) ---
        self.queue_length = Gauge(
            "gateway_queue_length", "Requests waiting in the gateway's queue, by model and priority band",
            ["model", "band"], registry=r)
        self.queue_wait = Histogram(
            "gateway_queue_wait_seconds",
            "How long dispatched requests waited in the gateway's queue (0 for those that never queued), "
            "by model and priority band", ["model", "band"], buckets=QUEUE_WAIT_BUCKETS, registry=r)
        self.queue_dropped = Counter(
            "gateway_queue_dropped",
            "Requests that left the gateway's queue unserved, by model, band and reason (queue_full, "
            "key_queue_full, timeout, displaced, cancelled, shutdown)", ["model", "band", "reason"], registry=r)

    def observe_request(self, route: str, status: int, seconds: float) -> None:
        """Count one answered request; label children are cached (``labels()`` is not free)."""
        key = (route, status)
        children = self._request_children.get(key)
        if children is None:
            children = self._request_children[key] = (
                counting(self.requests.labels(route, str(status))),
                observing(self.duration.labels(route)),
            )
        children[0](1)
        children[1](seconds)

    def stream_ended(self, how: str) -> None:
        child = self._ended_children.get(how)
        if child is None:
            child = self._ended_children[how] = self.streams_ended.labels(how)
        child.inc()

    def count_usage(self, key_id: str, usage: dict | None) -> None:
        if not usage:
            return
        prompt = usage.get("prompt_tokens") or 0
        completion = usage.get("completion_tokens") or 0
        children = self._token_children.get(key_id)
        if children is None:  # as many as there are keys
            prompt_child = self.tokens.labels(key_id, "prompt")
            completion_child = self.tokens.labels(key_id, "completion")
            children = self._token_children[key_id] = (prompt_child, completion_child,
                                                        counting(prompt_child), counting(completion_child))
        # A count the engine got wrong (negative, not a number) goes through prometheus_client's checks.
        if prompt:
            if type(prompt) is int and prompt > 0:
                children[2](prompt)
            else:
                children[0].inc(prompt)
        if completion:
            if type(completion) is int and completion > 0:
                children[3](completion)
            else:
                children[1].inc(completion)

    def queue_wait_observer(self, model: str, band: str) -> Callable[[float], None]:
        """``observe`` of ``gateway_queue_wait_seconds{model,band}`` for the request path (``observing``)."""
        return observing(self.queue_wait.labels(model, band))

    def first_token_timer(self, model: str | None) -> Histogram:
        """The time-to-first-token histogram child of ``model`` (cached; at most ``MAX_MODEL_LABELS``)."""
        model = model or "unknown"
        children = self._first_token_children
        child = children.get(model)
        if child is None:
            if len(children) >= MAX_MODEL_LABELS:
                model = OTHER_MODEL
                child = children.get(model)
            if child is None:
                child = children[model] = self.first_token.labels(model)
        return child

    def watch_models(self, source: Callable[[], Mapping[str, int]]) -> None:
        """Read ``gateway_model_engines_ready`` from ``source`` (the fleet: model -> engines ready)."""
        self.model_readiness.source = source

    def render(self) -> bytes:
        return generate_latest(self.registry)
