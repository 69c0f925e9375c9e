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
