"""Prometheus metrics, on a registry owned by the app (tests build many apps).

Labels are bounded: route templates (not raw paths), status codes, key ids
(digest prefixes of configured keys, so as many as there are keys), engines (the fleet's
members; an engine that leaves the fleet has its series removed), failure kinds and
routing reasons (short fixed words).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1)


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
        self.inflight = Gauge(
            "gateway_requests_in_flight", "Requests admitted and being served (read from admission control)", registry=r
        )
        self.rejected = Counter(
            "gateway_rejected", "Requests refused before reaching a route, by reason", ["reason"], registry=r
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

    def observe_request(self, route: str, status: int, seconds: float) -> None:
        """Count one answered request; label children are cached (``labels()`` is not free)."""
        key = (route, status)
        children = self._request_children.get(key)
        if children is None:
            children = self._request_children[key] = (
                self.requests.labels(route, str(status)),
                self.duration.labels(route),
            )
        children[0].inc()
        children[1].observe(seconds)

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
            children = self._token_children[key_id] = (self.tokens.labels(key_id, "prompt"),
                                                        self.tokens.labels(key_id, "completion"))
        if prompt:
            children[0].inc(prompt)
        if completion:
            children[1].inc(completion)

    def render(self) -> bytes:
        return generate_latest(self.registry)
