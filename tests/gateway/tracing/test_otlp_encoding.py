"""The hand-written OTLP encoder (gateway/tracing/otlp_encoding.py) writes the message the SDK's encoder builds.

Spans of every shape the gateway makes and more (each attribute value type, negative and
large integers, arrays, nested maps, events, links, a remote parent, a trace state, an error
status with a message, several resources and scopes in one batch) are encoded by both; the
bytes are decoded with ``opentelemetry-proto`` and the messages compared. The expected side is
the SDK's own encoder, not this code. Then both exporters (HTTP and gRPC) send through it to
receivers that decode the protobuf.
"""

from __future__ import annotations

import threading
from concurrent import futures

import grpc
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    set_span_in_context,
)
from opentelemetry.trace.span import TraceState

from gateway.tracing.otlp_encoding import OtlpEncoder
from gateway.tracing.otlp_grpc import GrpcExporter
from gateway.tracing.otlp_http import HttpExporter
from tests.support.otlp_receiver import OtlpReceiver

VALUES = {
    "text": "chat qwen3", "empty": "", "unicode": "modèle-量子-😀", "long": "x" * 300,
    "true": True, "false": False, "zero": 0, "small": 7, "big": 2**62 + 12345, "negative": -3, "most_negative": -2**63,
    "float": 0.5, "float_zero": 0.0, "float_negative": -1e-300,
    "texts": ["stop", "length"], "numbers": [1, -2, 3], "empty_list": [], "flags": [True, False],
    "floats": (0.25, 1e100),
}


def finished_spans() -> list:
    """Spans from two providers (two resources), two tracers each, of every shape."""
    memory = InMemorySpanExporter()
    for service in ("stack-gateway", "other"):
        provider = TracerProvider(resource=Resource.create({"service.name": service, "deployment.count": 3}))
        provider.add_span_processor(SimpleSpanProcessor(memory))
        tracer = provider.get_tracer("stack-gateway", "1.2", schema_url="https://opentelemetry.io/schemas/1.36.0")
        plain = provider.get_tracer("bare")
        remote = SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, is_remote=True,
                             trace_flags=TraceFlags(1), trace_state=TraceState([("vendor", "value"), ("k", "v")]))
        server = tracer.start_span("chat qwen3", context=set_span_in_context(NonRecordingSpan(remote)),
                                   kind=SpanKind.SERVER, attributes=VALUES)
        server.add_event("gen_ai.first_token")
        server.add_event("gateway.continuation", {"gateway.engine.from": "http://a:1", "count": 2})
        client = tracer.start_span("chat qwen3", context=set_span_in_context(server), kind=SpanKind.CLIENT,
                                   links=[Link(remote, {"why": "retry"}), Link(server.get_span_context())])
        client.set_status(Status(StatusCode.ERROR, "engine died: connection reset"))
        client.end()
        server.set_status(Status(StatusCode.OK))
        server.end()
        for kind in (SpanKind.INTERNAL, SpanKind.PRODUCER, SpanKind.CONSUMER):
            span = plain.start_span("queue", kind=kind, attributes={"gateway.queue.wait_ms": 12})
            span.set_status(Status(StatusCode.ERROR))
            span.end()
    return memory.get_finished_spans()


def test_the_bytes_decode_to_the_message_the_sdk_builds():
    spans = finished_spans()
    expected = encode_spans(spans)
    encoder = OtlpEncoder()
    for _ in range(2):  # the second time from its kept resource, scope and attribute encodings
        decoded = ExportTraceServiceRequest.FromString(encoder.encode(spans))
        assert decoded == expected
    assert len(decoded.resource_spans) == 2 and len(decoded.resource_spans[0].scope_spans) == 2
    assert sum(len(scope.spans) for resource in decoded.resource_spans for scope in resource.scope_spans) == 10


def test_an_empty_batch_is_an_empty_request():
    assert OtlpEncoder().encode([]) == b""
    assert ExportTraceServiceRequest.FromString(b"") == encode_spans([])


def test_the_http_exporter_sends_what_the_receiver_decodes():
    receiver = OtlpReceiver().start()
    try:
        spans = finished_spans()
        exporter = HttpExporter(endpoint=receiver.endpoint, timeout=10)
        assert exporter.export(spans) == SpanExportResult.SUCCESS
        exporter.shutdown()
        names = sorted((span.service, span.name, span.kind) for span in receiver.spans)
        assert names == sorted((span.resource.attributes["service.name"], span.name, span.kind.name)
                               for span in spans)
        server = next(span for span in receiver.spans if span.kind == "SERVER")
        assert server.attributes["unicode"] == "modèle-量子-😀" and server.attributes["negative"] == -3
        assert server.attributes["texts"] == ["stop", "length"]
        assert server.events[1] == ("gateway.continuation", {"gateway.engine.from": "http://a:1", "count": 2})
    finally:
        receiver.close()


class Collector(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.received = threading.Event()

    def Export(self, request, context):
        self.requests.append(request)
        self.received.set()
        return ExportTraceServiceResponse()


def test_the_grpc_exporter_sends_the_same_message():
    collector = Collector()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(collector, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        spans = finished_spans()
        exporter = GrpcExporter(endpoint=f"http://127.0.0.1:{port}", insecure=True, timeout=10)
        assert exporter.export(spans) == SpanExportResult.SUCCESS
        exporter.shutdown()
        assert collector.received.wait(10)
        assert collector.requests == [encode_spans(spans)]
    finally:
        server.stop(None)


class Recorded:
    """An exporter that keeps the gateway's own spans (``spans.Span``) as the batch processor hands them."""

    takes_recorded_spans = True

    def __init__(self) -> None:
        self.spans = []

    def export(self, spans):
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def recorded_spans() -> list:
    """A request's spans as the gateway records them: a caller's sampled traceparent and trace state,
    a queue wait, a failed engine call, a second one that answered, events past the bound, a late write."""
    from types import SimpleNamespace

    from yarl import URL

    from gateway.config import Settings
    from gateway.http.context import RequestContext
    from gateway.tracing.provider import MAX_EVENTS, Tracing

    class Engine:
        id = "http://10.0.0.7:8100"

        def url(self, path: str) -> URL:
            return URL(self.id + path)

        def score(self) -> float:
            return 2.5

    exporter = Recorded()
    tracing = Tracing.from_settings(Settings(otel_exporter_otlp_traces_endpoint="http://127.0.0.1:9/v1/traces"),
                                    exporter=exporter)
    path = "/v1/chat/completions"
    scope = {"type": "http", "path": path, "method": "POST", "headers": [
        (b"traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
        (b"tracestate", b"vendor=abc,other=1")]}
    request = RequestContext("req-1", scope=scope, principal=SimpleNamespace(key_id="k1", team_id="t1"))
    trace = tracing.begin(request, scope)
    trace.queued("batch", "dispatched", 0.25)
    trace.generation(path, "qwen3", b'{"model": "qwen3", "max_tokens": 4, "temperature": 0.5, "stream": true}',
                     session_id="s-1", streamed=True)
    router = SimpleNamespace(policy=SimpleNamespace(name="least_load"), last_reason="least_load",
                             last_affinity_hit=True, last_candidates=())
    trace.engine_call(Engine(), "POST", path, {}, router)
    trace.engine_failed("connect", "connection refused")
    trace.engine_call(Engine(), "POST", path, {})
    trace.first_bytes()
    for flush in range(MAX_EVENTS + 2):
        trace.stored({"gateway.session.events": flush, "gateway.session.write_ms": 1.5}, None)
    trace.stream_ended("done", {"prompt_tokens": 3, "completion_tokens": 4,
                                "prompt_tokens_details": {"cached_tokens": 2}}, "stop", None)
    trace.caller("k1", "t1")
    trace.end(200)
    trace.stored({"gateway.session.events": 1, "gateway.session.write_ms": 2}, "timeout")
    tracing.force_flush()
    tracing.shutdown()
    return exporter.spans


def test_the_gateways_spans_encoded_as_they_end_decode_to_the_message_the_sdk_builds_from_them():
    from gateway.tracing.otlp_encoding import recorded_field

    spans = recorded_spans()
    assert len(spans) == 5  # queue, failed call, call, server, late write
    expected = encode_spans([span.readable() for span in spans])
    encoder = OtlpEncoder()
    encoder.origin = spans[0].origin
    for _ in range(2):  # the second time from the kept fields
        assert ExportTraceServiceRequest.FromString(encoder.encode([recorded_field(span) for span in spans])) \
            == expected
        assert ExportTraceServiceRequest.FromString(encoder.encode(spans)) == expected
    server = next(span for span in expected.resource_spans[0].scope_spans[0].spans if span.kind == 2)
    assert server.dropped_events_count == 4 and server.trace_state == "vendor=abc,other=1"  # (130 writes, 2 more)


def test_a_key_seen_with_two_types_of_value_is_encoded_as_each_value_is():
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.trace import SpanContext

    context = SpanContext(1, 2, False, TraceFlags(1))
    spans = [ReadableSpan("s", context, attributes={"gen_ai.request.temperature": value}, start_time=1, end_time=2)
             for value in (1, True, 1.0, 1, "1", (1,), ("1",), [True], 1)]
    encoder = OtlpEncoder()
    for span in spans:  # one at a time: each after the kept fields of the ones before
        assert ExportTraceServiceRequest.FromString(encoder.encode([span])) == encode_spans([span])


def test_a_requests_own_text_is_written_as_the_sdk_writes_it_whatever_its_length():
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.trace import SpanContext

    context = SpanContext(1, 2, False, TraceFlags(1))
    encoder = OtlpEncoder()
    for value in ("", "req-1", "é-量-😀", "x" * 119, "x" * 120, "x" * 200, "y" * 20000):
        attributes = {"gateway.request_id": value, "gen_ai.response.id": value, "gateway.session.id": value,
                      "gen_ai.operation.name": "chat"}
        span = ReadableSpan("s", context, attributes=attributes, start_time=1, end_time=2)
        assert ExportTraceServiceRequest.FromString(encoder.encode([span])) == encode_spans([span])
