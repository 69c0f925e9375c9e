"""The gateway's spans as an OTLP collector receives them (the real protobuf), in front of the fake engine.

Names and attributes per the GenAI conventions (docs/tracing.md), the engine call as a child
CLIENT span whose context is the ``traceparent`` the engine received, the caller's
``traceparent`` honoured, the trace id in the response header and the log lines, no prompt
text anywhere, and nothing at all when tracing is off. The same against the real vLLM engine,
with vLLM's own spans joining the trace: tests/gateway/tracing/test_real_engine.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging

import orjson

from gateway.http.logs import JsonFormatter
from tests.gateway.tracing.conftest import traced
from tests.support.gateway import serving

SECRET_PROMPT = "my password is hunter2, please remember it"
CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"


@contextlib.contextmanager
def access_log_lines():
    """The access log's JSON lines written while inside, as the gateway formats them."""
    lines = io.StringIO()
    handler = logging.StreamHandler(lines)
    handler.setFormatter(JsonFormatter())
    access = logging.getLogger("gateway.access")
    access.addHandler(handler)
    level = access.level
    access.setLevel(logging.INFO)
    try:
        yield lines
    finally:
        access.removeHandler(handler)
        access.setLevel(level)


def chat(stream: bool = False, **extra) -> dict:
    return {"model": "fake-model", "messages": [{"role": "user", "content": SECRET_PROMPT}], "max_tokens": 4,
            "temperature": 0.5, "stream": stream, **extra}


def one_trace(spans, trace_id: str, names: set[str]):
    """The spans of ``trace_id`` once every name in ``names`` is among them."""
    found = [span for span in spans if span.trace_id == trace_id]
    return found if names <= {span.name for span in found} else None


async def wait_trace(receiver, trace_id: str, names: set[str]):
    return await asyncio.to_thread(receiver.wait_for, lambda spans: one_trace(spans, trace_id, names))


async def test_a_chat_call_is_a_server_span_with_a_client_span_per_engine_call(make_settings, fake_engine, receiver):
    async with serving(make_settings(**traced(receiver))) as client:
        response = await client.post("/v1/chat/completions", json=chat())
    assert response.status_code == 200
    trace_id = response.headers["x-trace-id"]
    spans = await wait_trace(receiver, trace_id, {"chat fake-model"})
    server = next(span for span in spans if span.kind == "SERVER")
    engine_call = next(span for span in spans if span.kind == "CLIENT")
    assert server.name == engine_call.name == "chat fake-model"
    assert server.service == "stack-gateway"
    assert server.parent_id == ""  # no caller's trace: a root
    assert engine_call.parent_id == server.span_id
    attributes = server.attributes
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.system"] == "vllm"  # v1.36.0 names without the opt-in
    assert attributes["gen_ai.request.model"] == "fake-model"
    assert attributes["gen_ai.response.model"] == "fake-model"
    assert attributes["gen_ai.request.max_tokens"] == 4
    assert attributes["gen_ai.request.temperature"] == 0.5
    assert attributes["gen_ai.usage.input_tokens"] == 5  # the fake engine's usage
    assert attributes["gen_ai.usage.output_tokens"] == 4
    assert attributes["gen_ai.response.finish_reasons"] == ["length"]
    assert attributes["http.response.status_code"] == 200
    assert attributes["gateway.request_id"] == response.headers["x-request-id"]
    assert attributes["gateway.key_id"]
    call = engine_call.attributes
    host, port = fake_engine.base_url.removeprefix("http://").split(":")
    assert call["server.address"] == host and call["server.port"] == int(port)
    assert call["gateway.engine.id"] == fake_engine.base_url
    assert call["gateway.routing.policy"] and call["gateway.routing.reason"]
    assert call["gateway.engine.attempt"] == 1
    assert call["gen_ai.usage.output_tokens"] == 4
    # The engine got the client span's context: vLLM's spans become its children.
    version, sent_trace, sent_parent, flags = fake_engine.received[-1].headers["traceparent"].split("-")
    assert (version, sent_trace, sent_parent) == ("00", trace_id, engine_call.span_id)
    assert int(flags, 16) & 1  # sampled
    # No prompt text in any span.
    assert SECRET_PROMPT not in repr(spans) and "hunter2" not in repr(spans)


async def test_a_stream_carries_usage_finish_reason_and_its_first_token(make_settings, receiver):
    async with serving(make_settings(**traced(receiver))) as client:
        response = await client.post("/v1/chat/completions", json=chat(stream=True))
        assert response.status_code == 200
        assert b"data: [DONE]" in response.content
    spans = await wait_trace(receiver, response.headers["x-trace-id"], {"chat fake-model"})
    server = next(span for span in spans if span.kind == "SERVER")
    assert server.attributes["gen_ai.request.stream"] is True
    assert server.attributes["gen_ai.usage.output_tokens"] == 4
    assert server.attributes["gateway.stream.ending"] == "completed"
    assert server.attributes["gen_ai.response.time_to_first_chunk"] > 0
    assert "gen_ai.first_token" in [name for name, _ in server.events]


async def test_the_callers_traceparent_is_honoured(make_settings, fake_engine, receiver):
    async with serving(make_settings(**traced(receiver))) as client:
        response = await client.post("/v1/chat/completions", json=chat(),
                                     headers={"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"})
    assert response.headers["x-trace-id"] == CALLER_TRACE
    spans = await wait_trace(receiver, CALLER_TRACE, {"chat fake-model"})
    server = next(span for span in spans if span.kind == "SERVER")
    assert server.parent_id == CALLER_SPAN
    assert fake_engine.received[-1].headers["traceparent"].startswith(f"00-{CALLER_TRACE}-")


async def test_the_latest_conventions_on_opt_in(make_settings, receiver):
    settings = make_settings(**traced(receiver, otel_semconv_stability_opt_in="gen_ai_latest_experimental"))
    async with serving(settings) as client:
        response = await client.post("/v1/completions", json={"model": "fake-model", "prompt": "hi", "max_tokens": 3})
    spans = await wait_trace(receiver, response.headers["x-trace-id"], {"text_completion fake-model"})
    server = next(span for span in spans if span.kind == "SERVER")
    assert server.attributes["gen_ai.provider.name"] == "vllm"
    assert "gen_ai.system" not in server.attributes
    assert server.attributes["gen_ai.operation.name"] == "text_completion"


async def test_unsampled_requests_export_nothing_but_still_propagate(make_settings, fake_engine, receiver):
    settings = make_settings(**traced(receiver, otel_traces_sampler_arg=0.0))
    async with serving(settings) as client:
        responses = [await client.post("/v1/chat/completions", json=chat()) for _ in range(3)]
        # A sampled caller's trace is kept whatever the ratio (parent-based sampling).
        kept = await client.post("/v1/chat/completions", json=chat(),
                                 headers={"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"})
        await wait_trace(receiver, CALLER_TRACE, {"chat fake-model"})
    assert all(response.status_code == 200 for response in responses)
    assert kept.status_code == 200
    unsampled = {response.headers["x-trace-id"] for response in responses}
    assert not [span for span in receiver.spans if span.trace_id in unsampled]
    sent = [received.headers["traceparent"] for received in fake_engine.received[:3]]
    assert [value.split("-")[1] for value in sent] == [response.headers["x-trace-id"] for response in responses]
    assert all(not int(value.split("-")[3], 16) & 1 for value in sent)  # not sampled: vLLM records nothing either


async def test_tracing_off_adds_no_header_no_traceparent_and_no_trace(make_settings, fake_engine):
    async with serving(make_settings()) as client:
        assert client.app.state.tracing is None
        response = await client.post("/v1/chat/completions", json=chat())
    assert response.status_code == 200
    assert "x-trace-id" not in response.headers
    assert "traceparent" not in fake_engine.received[-1].headers


async def test_an_endpoint_with_the_sdk_disabled_is_off(make_settings, receiver):
    async with serving(make_settings(**traced(receiver, otel_sdk_disabled=True))) as client:
        assert client.app.state.tracing is None


async def test_probes_are_not_traced(make_settings, receiver):
    async with serving(make_settings(**traced(receiver))) as client:
        probe = await client.get("/health")
        response = await client.post("/v1/chat/completions", json=chat())
        await wait_trace(receiver, response.headers["x-trace-id"], {"chat fake-model"})
    assert "x-trace-id" not in probe.headers
    assert {span.attributes.get("url.path") for span in receiver.spans if span.kind == "SERVER"} \
        == {"/v1/chat/completions"}


async def test_every_log_line_of_a_traced_request_carries_its_trace_id(make_settings, receiver):
    with access_log_lines() as lines:
        async with serving(make_settings(**traced(receiver), access_log=True)) as client:
            response = await client.post("/v1/chat/completions", json=chat())
    entries = [orjson.loads(line) for line in lines.getvalue().splitlines()]
    mine = [entry for entry in entries if entry.get("request_id") == response.headers["x-request-id"]]
    assert mine and all(entry["trace_id"] == response.headers["x-trace-id"] for entry in mine)


async def test_a_span_that_is_no_genai_call_is_named_by_its_route_never_its_path(make_settings, receiver):
    """HTTP's conventions: ``{method} {http.route}``, ``{method}`` when no route matched, ``HTTP``
    for a method they do not know (``_OTHER``): an id in a path (a file's, a response's) never makes
    a span name of its own, which a backend counting spans by name would keep apart for ever."""
    async with serving(make_settings(**traced(receiver))) as client:
        responses = [await client.get("/v1/files/file-4f1c0ffee"), await client.get("/v1/nothing/abc123"),
                     await client.request("FROB", "/v1/models")]
    found = [await wait_trace(receiver, response.headers["x-trace-id"], set()) for response in responses]
    named = [(spans[0].name, spans[0].attributes.get("http.route"), spans[0].attributes["http.request.method"])
             for spans in found]
    assert named == [("GET /v1/files/{file_id}", "/v1/files/{file_id}", "GET"), ("GET", None, "GET"),
                     ("HTTP", None, "_OTHER")]
    assert found[0][0].attributes["url.path"] == "/v1/files/file-4f1c0ffee"
    assert found[2][0].attributes["http.request.method_original"] == "FROB"


async def test_requests_refused_before_any_route_carry_their_trace_id_in_header_log_and_span(make_settings, receiver):
    """A 401 (a wrong key), a 413 (a body over the limit) and a 400 (a Content-Length that is no
    number): the middleware answers before routing, and each still has its trace."""
    with access_log_lines() as lines:
        async with serving(make_settings(**traced(receiver), access_log=True, api_keys=["sk-the-right-key-0123"],
                                         max_body_bytes=1024)) as client:
            refused = [
                await client.post("/v1/chat/completions", json=chat(), headers={"authorization": "Bearer sk-wrong"}),
                await client.post("/v1/chat/completions", json=chat(padding="x" * 2048),
                                  headers={"authorization": "Bearer sk-the-right-key-0123"}),
                await client.post("/v1/chat/completions", content=b"{}", headers={
                    "authorization": "Bearer sk-the-right-key-0123", "content-length": "two"}),
            ]
    assert [response.status_code for response in refused] == [401, 413, 400]
    entries = [orjson.loads(line) for line in lines.getvalue().splitlines()]
    for response in refused:
        trace_id = response.headers["x-trace-id"]
        mine = [entry for entry in entries if entry.get("request_id") == response.headers["x-request-id"]]
        assert mine and all(entry["trace_id"] == trace_id for entry in mine)
        spans = await wait_trace(receiver, trace_id, {"POST"})
        assert spans[0].attributes["http.response.status_code"] == response.status_code
    assert "sk-wrong" not in lines.getvalue() and all("sk-wrong" not in str(span.attributes)
                                                       for span in receiver.spans)
