"""The standard OpenTelemetry variables, read from the environment as the specification names them.

The traces' own exporter variables (``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``, ``_HEADERS``,
``_TIMEOUT``) win over the general ones; ``OTEL_TRACES_SAMPLER`` picks one of the
specification's samplers, whose decisions are compared with the SDK's own sampler built from
the same environment; ``OTEL_RESOURCE_ATTRIBUTES``' ``service.name`` counts unless
``OTEL_SERVICE_NAME`` is set. (The exporter's bounds: test_collector.py.)
"""

from __future__ import annotations

import asyncio
import threading
from concurrent import futures
from types import SimpleNamespace

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.trace import sampling
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.config import Settings
from gateway.http.context import RequestContext
from gateway.tracing.otlp_grpc import GrpcExporter
from gateway.tracing.otlp_http import HttpExporter
from gateway.tracing.provider import Tracing, otlp_exporter
from tests.support.gateway import serving

ENDPOINT = "http://127.0.0.1:9/v1/traces"
SAMPLERS = ("always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off",
            "parentbased_traceidratio")


@pytest.fixture
def environment(monkeypatch):
    """No OTEL_* variable but those a test sets."""
    import os

    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)
    return monkeypatch


class GrpcCollector(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.span_names: list[str] = []
        self.received = threading.Event()

    def Export(self, request, context):
        self.span_names += [span.name for spans in request.resource_spans for scope in spans.scope_spans
                            for span in scope.spans]
        self.received.set()
        return ExportTraceServiceResponse()


async def test_the_traces_own_protocol_variable_wins(environment, make_settings):
    """vLLM's documented set-up sets ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``: a gateway in the same
    environment sends over that protocol too (it used to send HTTP to the gRPC collector)."""
    collector = GrpcCollector()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(collector, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        environment.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{port}")
        environment.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")
        environment.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
        async with serving(make_settings()) as client:
            response = await client.post("/v1/chat/completions", json={
                "model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
            assert response.status_code == 200
            assert await asyncio.to_thread(collector.received.wait, 30)
        assert "chat fake-model" in collector.span_names
    finally:
        server.stop(None)


def test_the_traces_own_headers_and_timeout_win(environment):
    environment.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", ENDPOINT)
    environment.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-general=1")
    environment.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-traces=2")
    environment.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "9000")
    environment.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "1500")
    exporter = otlp_exporter(Settings())
    assert isinstance(exporter, HttpExporter)
    sent = exporter._client  # (what the SDK's HTTP client sends with each export)
    assert sent._headers["x-traces"] == "2" and "x-general" not in sent._headers and sent._timeout == 1.5
    environment.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    environment.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
    assert isinstance(otlp_exporter(Settings()), HttpExporter)
    environment.delenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
    assert isinstance(otlp_exporter(Settings()), GrpcExporter)


def test_headers_that_are_no_name_value_pairs_are_refused_by_name_without_their_text(environment):
    # "Authorization: Bearer ..." (a colon) was dropped in silence: no credentials, every export refused.
    environment.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", ENDPOINT)
    environment.setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization: Bearer vendor-secret-1")
    with pytest.raises(ValueError, match="OTEL_EXPORTER_OTLP_HEADERS must be name=value pairs") as refused:
        otlp_exporter(Settings())
    assert "vendor-secret-1" not in str(refused.value)
    environment.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "api-key=vendor-secret-2,=x")
    with pytest.raises(ValueError, match="OTEL_EXPORTER_OTLP_TRACES_HEADERS must be") as refused:
        otlp_exporter(Settings())
    assert "vendor-secret-2" not in str(refused.value)
    environment.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "api-key=vendor%20secret,team=a,")  # (a trailing comma)
    assert otlp_exporter(Settings())._client._headers["api-key"] == "vendor secret"


def begin(tracing: Tracing, traceparent: bytes | None):
    headers = [(b"traceparent", traceparent)] if traceparent is not None else []
    scope = {"type": "http", "path": "/v1/chat/completions", "method": "POST", "headers": headers}
    request = RequestContext("req-1", scope=scope, principal=SimpleNamespace(key_id="k1", team_id=None))
    return tracing.begin(request, scope)


@pytest.mark.parametrize("name", SAMPLERS)
def test_each_sampler_decides_as_the_sdks_sampler_of_the_same_environment(environment, name):
    """New traces, and a caller's sampled and unsampled ones: the SDK's sampler from the same
    variables (its own reading of OTEL_TRACES_SAMPLER) decides the same for each."""
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context

    environment.setenv("OTEL_TRACES_SAMPLER", name)
    environment.setenv("OTEL_TRACES_SAMPLER_ARG", "0.5")
    sdk = sampling._get_from_env_or_default()
    tracing = Tracing.from_settings(Settings(otel_exporter_otlp_traces_endpoint=ENDPOINT),
                                    exporter=InMemorySpanExporter())
    try:
        decisions = set()
        for index in range(300):
            flags = (None, b"01", b"00")[index % 3]
            trace_id = format(tracing.new_trace_id(), "032x")
            traceparent = None if flags is None else b"00-%s-b7ad6b7169203331-%s" % (trace_id.encode(), flags)
            trace = begin(tracing, traceparent)
            parent = None
            if flags is not None:
                parent = set_span_in_context(NonRecordingSpan(SpanContext(
                    int(trace_id, 16), 0xB7AD6B7169203331, is_remote=True,
                    trace_flags=TraceFlags(int(flags, 16)))))
            expected = sdk.should_sample(parent, trace.trace_id_value, "POST /v1/chat/completions")
            assert trace.sampled == expected.decision.is_sampled(), (name, flags)
            decisions.add(trace.sampled)
    finally:
        tracing.shutdown()
    assert decisions == ({True} if name == "always_on" else {False} if name == "always_off" else {True, False})


@pytest.mark.parametrize(("variables", "service"), [
    ({}, "stack-gateway"),
    ({"OTEL_RESOURCE_ATTRIBUTES": "service.name=edge-gw,deployment.environment=prod"}, "edge-gw"),
    ({"OTEL_RESOURCE_ATTRIBUTES": "service.name=edge-gw", "OTEL_SERVICE_NAME": "named"}, "named"),
])
def test_the_service_name(environment, variables, service):
    for name, value in variables.items():
        environment.setenv(name, value)
    tracing = Tracing.from_settings(Settings(otel_exporter_otlp_traces_endpoint=ENDPOINT),
                                    exporter=InMemorySpanExporter())
    try:
        assert tracing.provider.resource.attributes["service.name"] == service
    finally:
        tracing.shutdown()
