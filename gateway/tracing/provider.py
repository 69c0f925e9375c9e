"""Tracing set up from the settings: the SDK's provider, a bounded batch exporter, the sampler.

Off (``Tracing.from_settings`` returns None) unless an OTLP endpoint is set: then nothing of
OpenTelemetry runs per request (the request path asks ``request.get(RequestTrace)``, a
``None`` check). On, spans (encoded as each ends, for the gateway's own OTLP exporters) go
into the queue of the SDK's ``BatchSpanProcessor``, bounded
(``OTEL_BSP_MAX_QUEUE_SIZE``; beyond it spans are dropped, never waited for) and whose export
runs in the SDK's own thread with a timeout per attempt (``OTEL_EXPORTER_OTLP_TIMEOUT``): a
slow or dead collector costs the request path nothing but that append. Stopping waits for the
last export at most ``SHUTDOWN_SECONDS``.

The provider is the gateway's own, never installed as the global one: two apps in one process
(tests) trace apart, and a library's instrumentation does not start sending spans unasked.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import TYPE_CHECKING

from opentelemetry.trace import TraceFlags, get_current_span
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gateway.config import Settings
from gateway.tracing.conventions import Conventions
from gateway.tracing.otlp_encoding import OtlpEncoder, recorded_field
from gateway.tracing.request import RequestTrace
from gateway.tracing.spans import MAX_EVENTS, SdkSpans, Span  # noqa: F401 (MAX_EVENTS: the tests import it from here)

if TYPE_CHECKING:  # the SDK is imported only when tracing is on (a gateway without it never loads it)
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

log = logging.getLogger("gateway.tracing")

SHUTDOWN_SECONDS = 3.0
DEFAULT_SERVICE_NAME = "stack-gateway"
MAX_EXPORT_BATCH = 512
# Requests not worth a trace: probes and scrapes, every few seconds from every prober.
UNTRACED_PATHS = frozenset({"/health", "/livez", "/readyz", "/metrics", "/favicon.ico"})
_propagator = TraceContextTextMapPropagator()
# The methods HTTP's conventions know; any other is recorded as ``_OTHER`` (its span named ``HTTP``).
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"})
_bits = random.getrandbits  # what the SDK's RandomIdGenerator draws ids with


class Tracing:
    """The gateway's tracer; ``begin`` makes a request's :class:`RequestTrace`."""

    def __init__(self, provider: TracerProvider, processor: BatchSpanProcessor, conventions: Conventions,
                 ratio: float = 1.0, follow_parent: bool = True) -> None:
        from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
        from opentelemetry.sdk.trace.sampling import TraceIdRatioBased
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        self.provider = provider
        self.processor = processor
        self.conventions = conventions
        self.sampler = provider.sampler
        self.ids = provider.id_generator
        self.random_ids = self.ids.is_trace_id_random()
        self.scope = InstrumentationScope("stack-gateway", schema_url=conventions.schema_url)  # = get_tracer's
        self.origin = (provider.resource, self.scope)  # every span's resource and scope
        # The sampler's decision, as ParentBased(TraceIdRatioBased(ratio)) makes it (a test compares them):
        # a caller's sampled flag, else the trace id's low 64 bits under the ratio's bound (always_on and
        # always_off are the ratios 1 and 0). Not parent-based: the ratio decides for a caller's trace too.
        self.follow_parent = follow_parent
        self.bound = TraceIdRatioBased.get_bound_for_rate(ratio)
        self.id_limit = TraceIdRatioBased.TRACE_ID_LIMIT
        # The SDK's default ids are random.getrandbits (RandomIdGenerator): drawn here without its calls.
        self.own_ids = type(self.ids) is RandomIdGenerator
        # Spans go straight into the SDK batch processor's bounded queue (its schedule, flush, shutdown):
        # ``BatchSpanProcessor.on_end`` only checks the sampled flag, which a recorded span has. To the
        # gateway's OTLP exporters, encoded as they end (bytes: nothing left for the garbage collector
        # to walk while they wait for the export); to others, as the ``Span``s they are.
        self.enqueue = processor._batch_processor.emit
        encoder = getattr(processor.span_exporter, "encoder", None)
        if isinstance(encoder, OtlpEncoder):
            encoder.origin = self.origin
            self.finished = self._encoded
        else:
            self.finished = self.enqueue

    def _encoded(self, span: Span) -> None:
        self.enqueue(recorded_field(span))

    @classmethod
    def from_settings(cls, settings: Settings, exporter: SpanExporter | None = None) -> Tracing | None:
        """Tracing as the settings ask (None: off). ``exporter``: tests' own, instead of OTLP."""
        if exporter is None:
            if settings.otel_sdk_disabled:
                return None
            exporter = otlp_exporter(settings)
            if exporter is None:
                return None
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

        if not isinstance(getattr(exporter, "encoder", None), OtlpEncoder) \
                and not getattr(exporter, "takes_recorded_spans", False):  # it wants the SDK's spans
            exporter = SdkSpans(exporter)
        resource = Resource.create({"service.name": settings.otel_service_name} if settings.otel_service_name
                                   else {})  # (OTEL_SERVICE_NAME, else OTEL_RESOURCE_ATTRIBUTES' service.name)
        if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
            resource = resource.merge(Resource({"service.name": DEFAULT_SERVICE_NAME}))
        ratio, follow_parent = sampling(settings)
        sampler = TraceIdRatioBased(ratio)
        if follow_parent:
            sampler = ParentBased(sampler)
        provider = TracerProvider(resource=resource, sampler=sampler)
        processor = BatchSpanProcessor(exporter, max_queue_size=settings.otel_bsp_max_queue_size,
                                       schedule_delay_millis=settings.otel_bsp_schedule_delay,
                                       max_export_batch_size=min(MAX_EXPORT_BATCH, settings.otel_bsp_max_queue_size),
                                       export_timeout_millis=export_timeout_ms(settings))
        provider.add_span_processor(processor)
        return cls(provider, processor, Conventions(settings.otel_semconv_stability_opt_in), ratio, follow_parent)

    def begin(self, request, scope) -> RequestTrace | None:
        """The server span of ``request`` (a ``RequestContext``), joined to the caller's ``traceparent``.

        What the SDK's ``start_span`` decides, without its span: the trace id (the caller's, or a
        new one from the provider's id generator), the provider's sampler's decision, the trace
        flags (sampled; the trace id's randomness, W3C level 2), a span id.
        """
        path = scope["path"]
        if path in UNTRACED_PATHS:
            return None
        carrier = None
        for name, value in scope["headers"]:
            if name == b"traceparent" or name == b"tracestate":
                if carrier is None:
                    carrier = {}
                carrier[name.decode()] = value.decode("latin-1")
        context = parent = None
        if carrier is not None:
            context = _propagator.extract(carrier)
            parent = get_current_span(context).get_span_context()
            if not parent.is_valid:
                parent = None
        method = scope["method"]
        name = method  # (named at its end: {operation} {model}, or {method} {route})
        if parent is not None:  # the caller's trace joined, its trace state kept; ParentBased: its decision too
            trace_id = parent.trace_id
            sampled = parent.trace_flags.sampled if self.follow_parent else trace_id & self.id_limit < self.bound
            trace_state = parent.trace_state
            random_id = parent.trace_flags.random_trace_id
        else:
            trace_id = self.new_trace_id() if self.own_ids else self.ids.generate_trace_id()
            sampled = trace_id & self.id_limit < self.bound
            trace_state = None
            random_id = self.random_ids
        flags = (TraceFlags.SAMPLED if sampled else 0) | (TraceFlags.RANDOM_TRACE_ID if random_id else 0)
        attributes = {"http.request.method": method, "url.path": path,
                      "gateway.request_id": request.request_id} if sampled else {}
        if sampled and method not in HTTP_METHODS:  # (a client's own word: not a name or a value to group by)
            attributes["http.request.method"] = "_OTHER"
            attributes["http.request.method_original"] = method[:32]
        trace = RequestTrace(self, name, trace_id, self.new_span_id(), flags, trace_state, parent, sampled,
                             attributes)
        request.put(trace)
        request.add_response_header("x-trace-id", trace.trace_id)
        return trace

    def new_trace_id(self) -> int:
        trace_id = _bits(128)
        while not trace_id:  # (the invalid id, as RandomIdGenerator draws again)
            trace_id = _bits(128)
        return trace_id

    def new_span_id(self) -> int:
        if not self.own_ids:
            return self.ids.generate_span_id()
        span_id = _bits(64)
        while not span_id:
            span_id = _bits(64)
        return span_id

    def force_flush(self) -> None:
        self.processor.force_flush()

    def shutdown(self) -> None:
        """Export what is left, waiting at most ``SHUTDOWN_SECONDS`` (a dead collector does not hold a stop)."""
        started = time.monotonic()
        stopper = threading.Thread(target=self.provider.shutdown, name="tracing-shutdown", daemon=True)
        stopper.start()
        stopper.join(SHUTDOWN_SECONDS)
        if stopper.is_alive():
            log.warning("the trace collector did not take the last spans in %.0f s: dropped",
                        time.monotonic() - started)


def sampling(settings: Settings) -> tuple[float, bool]:
    """``OTEL_TRACES_SAMPLER`` (and its ``_ARG`` for the ratio samplers) as (ratio, parent-based)."""
    name = settings.otel_traces_sampler or "parentbased_traceidratio"
    follow_parent = name.startswith("parentbased_")
    name = name.removeprefix("parentbased_")
    ratio = 1.0 if name == "always_on" else 0.0 if name == "always_off" else settings.otel_traces_sampler_arg
    return ratio, follow_parent


def otlp_exporter(settings: Settings) -> SpanExporter | None:
    """The OTLP exporter the settings name (HTTP/protobuf or gRPC), or None when no endpoint is set."""
    endpoint = settings.otel_exporter_otlp_traces_endpoint
    base = settings.otel_exporter_otlp_endpoint
    if not endpoint and not base:
        return None
    # The traces' own variables win over the general ones (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: the
    # same one vLLM reads, set for both in one environment).
    secret = settings.otel_exporter_otlp_traces_headers or settings.otel_exporter_otlp_headers
    name = "OTEL_EXPORTER_OTLP_TRACES_HEADERS" if settings.otel_exporter_otlp_traces_headers \
        else "OTEL_EXPORTER_OTLP_HEADERS"
    headers = parse_headers(secret.get_secret_value() if secret is not None else "", name)
    timeout = export_timeout_ms(settings) / 1000
    protocol = settings.otel_exporter_otlp_traces_protocol or settings.otel_exporter_otlp_protocol
    if protocol == "grpc":
        from gateway.tracing.otlp_grpc import GrpcExporter
        target = endpoint or base
        return GrpcExporter(endpoint=target, headers=headers, timeout=timeout,
                            insecure=target.startswith("http://"))
    from gateway.tracing.otlp_http import HttpExporter
    if not endpoint:  # the signal's path is added to the base endpoint (the specification's rule)
        endpoint = base.rstrip("/") + "/v1/traces"
    return HttpExporter(endpoint=endpoint, headers=headers, timeout=timeout)


def export_timeout_ms(settings: Settings) -> float:
    return settings.otel_exporter_otlp_traces_timeout or settings.otel_exporter_otlp_timeout


def parse_headers(text: str, variable: str = "OTEL_EXPORTER_OTLP_HEADERS") -> dict[str, str]:
    """``OTEL_EXPORTER_OTLP_HEADERS``: ``name=value`` pairs separated by commas (values URL-encoded).

    A pair that is not one is refused, naming ``variable`` but never the text (it holds a vendor's
    key): dropped, as it was, the exporter sent no credentials and every export was refused.
    """
    from urllib.parse import unquote

    headers = {}
    for pair in text.split(","):
        if not pair.strip():
            continue
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"{variable} must be name=value pairs separated by commas (e.g. "
                             f"api-key=...,team=...; values URL-encoded); one is not (its text is not shown)")
        headers[name.strip().lower()] = unquote(value.strip())
    return headers
