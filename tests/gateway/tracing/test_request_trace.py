"""A request's trace as the SDK's batch processor receives it (gateway/tracing/request.py), without a server.

The spans are recorded as plain values and handed over as the SDK's ``ReadableSpan``s when they
end; what the SDK's own spans did must still hold: the caller's sampling decision and trace
state, a remote parent, ids and flags in the ``traceparent``, the SDK's bound on events, and
nothing recorded after the server span ended. The spans go to the SDK's in-memory exporter.
"""

from __future__ import annotations

from types import SimpleNamespace

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from yarl import URL

from gateway.config import Settings
from gateway.http.context import RequestContext
from gateway.tracing.provider import MAX_EVENTS, Tracing

CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"
PATH = "/v1/chat/completions"


class Engine:
    id = "http://10.0.0.7:8100"

    def url(self, path: str) -> URL:
        return URL(self.id + path)

    def score(self) -> float:
        return 2.0


def traced(ratio: float = 1.0):
    exporter = InMemorySpanExporter()
    settings = Settings(otel_exporter_otlp_traces_endpoint="http://127.0.0.1:9/v1/traces",
                        otel_traces_sampler_arg=ratio)
    return Tracing.from_settings(settings, exporter=exporter), exporter


def begin(tracing: Tracing, *headers: tuple[bytes, bytes]):
    scope = {"type": "http", "path": PATH, "method": "POST", "headers": [(b"host", b"gw"), *headers]}
    request = RequestContext("req-1", scope=scope, principal=SimpleNamespace(key_id="k1", team_id="t1"))
    return request, tracing.begin(request, scope)


def finished(tracing: Tracing, exporter: InMemorySpanExporter) -> dict:
    tracing.force_flush()
    return {span.kind: span for span in exporter.get_finished_spans()}


def test_a_request_is_a_server_span_and_a_client_span_carrying_the_traceparent_sent():
    tracing, exporter = traced()
    request, trace = begin(tracing)
    trace.generation(PATH, "qwen3", b'{"model": "qwen3", "max_tokens": 4, "temperature": 0}')
    headers = trace.engine_call(Engine(), "POST", PATH, {"content-type": "application/json"})
    trace.answered(200, b'{"model": "qwen3", "usage": {"prompt_tokens": 3, "completion_tokens": 4}}')
    trace.caller("k1", "t1")
    trace.end(200)
    spans = finished(tracing, exporter)
    server, client = spans[SpanKind.SERVER], spans[SpanKind.CLIENT]
    assert server.name == client.name == "chat qwen3"
    assert client.parent.span_id == server.context.span_id and server.parent is None
    assert format(server.context.trace_id, "032x") == trace.trace_id == request.response_headers[0][1].decode()
    version, trace_id, parent, flags = headers["traceparent"].split("-")
    assert (version, trace_id, parent) == ("00", trace.trace_id, format(client.context.span_id, "016x"))
    assert int(flags, 16) == 0x03  # sampled, and a random trace id (W3C trace context level 2), as the SDK sets
    assert server.context.trace_flags == client.context.trace_flags == 0x03
    assert server.attributes["gateway.key_id"] == "k1" and server.attributes["gateway.team_id"] == "t1"
    assert server.attributes["gen_ai.request.temperature"] == 0 and server.attributes["gen_ai.usage.output_tokens"] == 4
    assert client.attributes["server.address"] == "10.0.0.7" and client.attributes["server.port"] == 8100
    assert client.attributes["gateway.routing.reason"] == "pinned"
    assert server.start_time <= client.start_time <= client.end_time <= server.end_time
    assert server.instrumentation_scope.name == "stack-gateway"
    assert server.resource.attributes["service.name"] == "stack-gateway"


def test_a_callers_unsampled_traceparent_is_followed_whatever_the_ratio():
    tracing, exporter = traced(ratio=1.0)
    _, trace = begin(tracing, (b"traceparent", f"00-{CALLER_TRACE}-{CALLER_SPAN}-00".encode()))
    headers = trace.engine_call(Engine(), "POST", PATH, {})
    trace.end(200)
    assert finished(tracing, exporter) == {}
    assert headers["traceparent"].startswith(f"00-{CALLER_TRACE}-") and headers["traceparent"].endswith("-00")


def test_a_callers_sampled_trace_and_its_state_are_joined():
    tracing, exporter = traced(ratio=0.0)
    _, trace = begin(tracing, (b"traceparent", f"00-{CALLER_TRACE}-{CALLER_SPAN}-01".encode()),
                     (b"tracestate", b"vendor=abc,other=1"))
    headers = trace.engine_call(Engine(), "POST", PATH, {})
    trace.end(502)
    spans = finished(tracing, exporter)
    server, client = spans[SpanKind.SERVER], spans[SpanKind.CLIENT]
    assert format(server.parent.span_id, "016x") == CALLER_SPAN and server.parent.is_remote
    assert headers["tracestate"] == "vendor=abc,other=1"
    assert client.context.trace_state.to_header() == "vendor=abc,other=1"
    assert int(headers["traceparent"].split("-")[3], 16) == 0x01  # the caller's trace id is not said to be random
    assert server.status.status_code == client.status.status_code == StatusCode.ERROR
    assert client.attributes["error.type"] == "http_502" and server.attributes["error.type"] == "502"


def test_events_past_the_sdks_bound_drop_the_oldest_and_are_counted():
    tracing, exporter = traced()
    _, trace = begin(tracing)
    for flush in range(MAX_EVENTS + 5):
        trace.stored({"gateway.session.events": flush, "gateway.session.write_ms": 1}, None)
    trace.end(200)
    server = finished(tracing, exporter)[SpanKind.SERVER]
    assert len(server.events) == MAX_EVENTS and server.dropped_events == 5
    assert server.events[0].attributes["gateway.session.events"] == 5


def test_after_the_server_span_ended_a_store_write_is_a_child_span_and_nothing_else_is_recorded():
    tracing, exporter = traced()
    _, trace = begin(tracing)
    trace.end(200)
    trace.caller("late", None)
    trace.first_bytes()
    trace.stored({"gateway.session.events": 2, "gateway.session.write_ms": 3}, "timeout")
    tracing.force_flush()
    server, write = sorted(exporter.get_finished_spans(), key=lambda span: span.name != "POST " + PATH)
    assert "gateway.key_id" not in server.attributes and not server.events
    assert write.name == "session.write" and write.parent.span_id == server.context.span_id
    assert write.end_time - write.start_time == 3_000_000 and write.status.status_code == StatusCode.ERROR


def test_the_sampling_decision_is_the_sdks_parent_based_ratio_sampler():
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    for ratio in (0.0, 0.25, 1.0):
        tracing, _ = traced(ratio)
        sdk = ParentBased(TraceIdRatioBased(ratio))
        for _ in range(200):
            _, trace = begin(tracing)
            decision = sdk.should_sample(None, trace.trace_id_value, "POST " + PATH)
            assert trace.sampled == decision.decision.is_sampled()
        tracing.shutdown()


def test_parameters_carry_the_conventions_types_whatever_the_json_number():
    """``"temperature": 0`` is a JSON integer: the attribute is a double all the same (a collector
    keeps one type per attribute); counts stay ints, and a count sent as 4.0 is not recorded."""
    tracing, exporter = traced()
    _, trace = begin(tracing)
    trace.generation(PATH, "qwen3", b'{"max_tokens": 4, "temperature": 0, "top_p": 1, "top_k": 20, "seed": 7,'
                                    b' "n": 2.0, "presence_penalty": 0}')
    trace.end(200)
    server = finished(tracing, exporter)[SpanKind.SERVER]
    typed = {key: (type(value), value) for key, value in server.attributes.items() if key.startswith("gen_ai.request.")}
    assert typed == {"gen_ai.request.model": (str, "qwen3"), "gen_ai.request.max_tokens": (int, 4),
                     "gen_ai.request.temperature": (float, 0.0), "gen_ai.request.top_p": (float, 1.0),
                     "gen_ai.request.top_k": (float, 20.0), "gen_ai.request.seed": (int, 7),
                     "gen_ai.request.presence_penalty": (float, 0.0)}


def test_the_gateways_own_engine_calls_end_their_spans_and_name_an_unnamed_request():
    """The code API's ``/generate`` looks at ``/tokenize`` and then completes through ``post_json``:
    the look is a span that succeeded (not one ``abandoned`` by the next call), and the request is a
    ``text_completion`` with the completion's usage."""
    from gateway.tracing import hooks

    tracing, exporter = traced()
    request, trace = begin(tracing)
    payload = {"model": "qwen3", "prompt": "def f():", "max_tokens": 5, "temperature": 0.2}
    hooks.own_call_started(request, "/tokenize", {"model": "qwen3", "prompt": "def f():"})
    trace.engine_call(Engine(), "POST", "/tokenize", {})
    hooks.own_call_answered(request, "/tokenize", "qwen3", 200, b'{"count": 4, "max_model_len": 2048, "tokens": [1, 2, 3, 4]}',
                            None)
    hooks.own_call_started(request, "/v1/completions", payload)
    trace.engine_call(Engine(), "POST", "/v1/completions", {})
    hooks.own_call_answered(request, "/v1/completions", "qwen3", 200, b'{"id": "cmpl-1", "model": "qwen3", '
                            b'"choices": [{"text": "x", "finish_reason": "length"}], "usage": {"prompt_tokens": 4, '
                            b'"completion_tokens": 5}}', None)
    trace.end(200)
    tracing.force_flush()
    spans = exporter.get_finished_spans()
    assert [(span.name, span.status.status_code) for span in spans] == [
        ("POST /tokenize", StatusCode.UNSET), ("text_completion qwen3", StatusCode.UNSET),
        ("text_completion qwen3", StatusCode.UNSET)]
    look, completion, server = spans
    assert "error.type" not in look.attributes and "gen_ai.usage.output_tokens" not in look.attributes
    for span in (completion, server):
        assert span.attributes["gen_ai.operation.name"] == "text_completion"
        assert span.attributes["gen_ai.usage.input_tokens"] == 4 and span.attributes["gen_ai.usage.output_tokens"] == 5
    assert server.attributes["gen_ai.request.temperature"] == 0.2


def test_an_engine_call_that_failed_or_was_cut_says_why_in_error_type():
    """An engine's 4xx/5xx answer is the engine call's error (a client span: HTTP's conventions), with
    ``error.type``; a call cut by its client leaving (499) is ``client_disconnect``. The server span of
    a 4xx stays unset (a server's 4xx is its caller's error)."""
    for status, answer, kind in ((404, b'{"error": {"message": "no"}}', "http_404"),
                                 (499, None, "client_disconnect")):
        tracing, exporter = traced()
        _, trace = begin(tracing)
        trace.generation(PATH, "qwen3", b'{}')
        trace.engine_call(Engine(), "POST", PATH, {})
        if answer is not None:
            trace.answered(status, answer)
        trace.end(status)
        spans = finished(tracing, exporter)
        client, server = spans[SpanKind.CLIENT], spans[SpanKind.SERVER]
        assert client.attributes["error.type"] == kind and client.status.status_code == StatusCode.ERROR
        assert "error.type" not in server.attributes and server.status.status_code == StatusCode.UNSET
        assert server.attributes["http.response.status_code"] == status


def test_a_stream_that_broke_after_its_200_is_an_error_with_a_short_error_type():
    """The client had a 200 and then a broken stream: both spans are errors, ``error.type`` the
    metrics' ``stream_interrupted`` (a fixed word to group by), the message in the status. A stream
    the engine refused (a 4xx before any event) ends its call as that status."""
    cause = "the inference engine sent an invalid response (ClientPayloadError)"
    tracing, exporter = traced()
    _, trace = begin(tracing)
    trace.generation(PATH, "qwen3", b'{"stream": true}')
    trace.engine_call(Engine(), "POST", PATH, {})
    trace.stream_ended("error", {"prompt_tokens": 3, "completion_tokens": 2}, None, cause)
    trace.end(200)
    spans = finished(tracing, exporter)
    for span in spans.values():
        assert span.attributes["error.type"] == "stream_interrupted" and span.status.status_code == StatusCode.ERROR
    assert spans[SpanKind.CLIENT].status.description == cause

    tracing, exporter = traced()
    _, trace = begin(tracing)
    trace.generation(PATH, "qwen3", b'{"stream": true}')
    trace.engine_call(Engine(), "POST", PATH, {})
    trace.end(400)
    spans = finished(tracing, exporter)
    assert spans[SpanKind.CLIENT].attributes["error.type"] == "http_400"
    assert spans[SpanKind.SERVER].status.status_code == StatusCode.UNSET
