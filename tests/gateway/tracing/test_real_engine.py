"""Traces of a real gateway in front of the real vLLM engine, which exports its own spans.

The engine is launched for this module with ``--otlp-traces-endpoint`` pointed at the test's
OTLP/HTTP receiver (the real protobuf payloads); the gateway sends its spans there too. One
request through the official SDKs yields the gateway's server span, its engine call (a CLIENT
span) and vLLM's ``llm_request`` span in one trace, vLLM's a child of the gateway's engine
call: the ``traceparent`` reached the engine. Chat (streamed and not), an Anthropic Messages
call and a Responses call; then a fleet of two engines in front of it (the second through a
TCP proxy the test shuts): a failover before the first byte, and a stream continued on the
other engine with the continuation in its trace.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import anthropic
import httpx
import openai
import pytest

from gateway.app import create_app
from gateway.config import Settings
from tests.gateway.tracing.conftest import traced
from tests.support.engine import EngineHandle, _LaunchedEngine
from tests.support.gateway import READ_KEY, WRITE_KEY
from tests.support.otlp_receiver import OtlpReceiver, Span, render
from tests.support.servers import serve_uvicorn
from tests.support.sse_client import fresh_client
from tests.support.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.integration, pytest.mark.engine]

DEADLINE = 120.0
SHOWN = ("gateway.engine.id", "gateway.engine.attempt", "gateway.routing.reason", "error.type",
         "gateway.stream.ending", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens",
         "gen_ai.usage.completion_tokens", "gen_ai.latency.time_in_queue")


@pytest.fixture(scope="module")
def collector() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver().start()
    yield receiver
    receiver.close()


@pytest.fixture(scope="module")
def traced_engine(tmp_path_factory: pytest.TempPathFactory, collector: OtlpReceiver) -> Iterator[EngineHandle]:
    """vLLM exporting its spans to ``collector`` over OTLP/HTTP, in 200 ms batches."""
    launcher = _LaunchedEngine(tmp_path_factory.mktemp("traced-engine"),
                               extra_args=("--otlp-traces-endpoint", collector.endpoint),
                               env={"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
                                    "OTEL_BSP_SCHEDULE_DELAY": "200", "OTEL_SERVICE_NAME": "vllm"})
    with launcher as engine:
        yield engine


def gateway_settings(engine: EngineHandle, collector: OtlpReceiver, tmp_path, **values) -> Settings:
    return Settings(**{"vllm_base_url": engine.base_url, "vllm_api_key": engine.api_key, "api_keys": [READ_KEY],
                       "database_url": f"sqlite+aiosqlite:///{tmp_path}/gateway.db", "access_log": False,
                       "session_store": "off", **traced(collector), **values})


def joined(trace_id: str, gateway_name: str, engine_spans: int = 1):
    """A predicate: the gateway's server span named ``gateway_name`` and vLLM's spans of ``trace_id`` are in."""
    def predicate(spans: list[Span]):
        mine = [span for span in spans if span.trace_id == trace_id]
        servers = [span for span in mine if span.kind == "SERVER" and span.name == gateway_name]
        engine = [span for span in mine if span.name == "llm_request"]
        return mine if servers and len(engine) >= engine_spans else None
    return predicate


async def received(collector: OtlpReceiver, trace_id: str, gateway_name: str, engine_spans: int = 1) -> list[Span]:
    return await asyncio.to_thread(collector.wait_for, joined(trace_id, gateway_name, engine_spans),
                                   timeout=DEADLINE)


def check_joined(spans: list[Span], model: str) -> tuple[Span, Span, Span]:
    """The gateway's server span, its engine call and vLLM's span, checked for their family ties."""
    server = next(span for span in spans if span.kind == "SERVER" and span.service == "stack-gateway")
    calls = [span for span in spans if span.kind == "CLIENT"]
    vllm = next(span for span in spans if span.name == "llm_request")
    assert len(calls) == 1
    call = calls[0]
    assert call.parent_id == server.span_id
    assert vllm.parent_id == call.span_id  # the traceparent reached vLLM and it joined the trace
    assert vllm.service == "vllm"
    assert server.attributes["gen_ai.request.model"] == model
    assert call.attributes["gateway.engine.attempt"] == 1
    return server, call, vllm


async def test_a_streamed_chat_joins_vllms_spans(traced_engine, collector, tmp_path):
    async with serve_uvicorn(create_app(gateway_settings(traced_engine, collector, tmp_path))) as base_url:
        client = openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key=READ_KEY, max_retries=0)
        raw = await client.chat.completions.with_raw_response.create(
            model=traced_engine.model, messages=[{"role": "user", "content": "Tell me about lighthouses."}],
            max_tokens=12, temperature=0, stream=True, stream_options={"include_usage": True})
        chunks = [chunk async for chunk in raw.parse()]
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens == 12
    spans = await received(collector, raw.headers["x-trace-id"], f"chat {traced_engine.model}")
    server, call, vllm = check_joined(spans, traced_engine.model)
    assert server.attributes["gen_ai.usage.output_tokens"] == usage.completion_tokens
    assert server.attributes["gen_ai.usage.input_tokens"] == usage.prompt_tokens
    assert server.attributes["gen_ai.request.stream"] is True
    assert server.attributes["gen_ai.response.time_to_first_chunk"] > 0
    assert vllm.attributes["gen_ai.usage.completion_tokens"] == usage.completion_tokens  # vLLM's own count
    assert call.attributes["server.port"] == int(traced_engine.base_url.rsplit(":", 1)[1])


async def test_a_chat_call_its_usage_and_finish_reason(traced_engine, collector, tmp_path):
    async with serve_uvicorn(create_app(gateway_settings(traced_engine, collector, tmp_path))) as base_url:
        client = openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key=READ_KEY, max_retries=0)
        raw = await client.chat.completions.with_raw_response.create(
            model=traced_engine.model, messages=[{"role": "user", "content": "Hello"}], max_tokens=5, temperature=0)
        completion = raw.parse()
    spans = await received(collector, raw.headers["x-trace-id"], f"chat {traced_engine.model}")
    server, call, _ = check_joined(spans, traced_engine.model)
    for span in (server, call):
        assert span.attributes["gen_ai.usage.input_tokens"] == completion.usage.prompt_tokens
        assert span.attributes["gen_ai.usage.output_tokens"] == completion.usage.completion_tokens
        assert span.attributes["gen_ai.response.finish_reasons"] == [completion.choices[0].finish_reason]
        assert span.attributes["gen_ai.response.model"] == completion.model
        assert span.attributes["gen_ai.response.id"] == completion.id


async def test_an_anthropic_messages_call(traced_engine, collector, tmp_path):
    async with serve_uvicorn(create_app(gateway_settings(traced_engine, collector, tmp_path))) as base_url:
        async with anthropic.AsyncAnthropic(base_url=base_url, api_key=READ_KEY, max_retries=0) as client:
            raw = await client.messages.with_raw_response.create(
                model=traced_engine.model, max_tokens=6, messages=[{"role": "user", "content": "Hello"}])
            message = await raw.parse()
    spans = await received(collector, raw.headers["x-trace-id"], f"chat {traced_engine.model}")
    server, _, _ = check_joined(spans, traced_engine.model)
    assert server.attributes["gen_ai.usage.input_tokens"] == message.usage.input_tokens
    assert server.attributes["gen_ai.usage.output_tokens"] == message.usage.output_tokens
    assert server.attributes["gen_ai.response.finish_reasons"] == [message.stop_reason]
    assert server.attributes["url.path"] == "/v1/messages"


async def test_a_responses_call(traced_engine, collector, tmp_path):
    async with serve_uvicorn(create_app(gateway_settings(traced_engine, collector, tmp_path))) as base_url:
        client = openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key=READ_KEY, max_retries=0)
        raw = await client.responses.with_raw_response.create(model=traced_engine.model, input="Hello",
                                                              max_output_tokens=6, temperature=0)
        response = raw.parse()
    spans = await received(collector, raw.headers["x-trace-id"], f"chat {traced_engine.model}")
    server, _, _ = check_joined(spans, traced_engine.model)
    assert server.attributes["gen_ai.usage.output_tokens"] == response.usage.output_tokens
    assert server.attributes["url.path"] == "/v1/responses"


async def test_the_code_apis_routes_are_genai_calls_and_their_tokenize_look_no_error(traced_engine, collector,
                                                                                      tmp_path):
    """``/generate`` and the code API's ``/chat`` measure the prompt with ``/tokenize`` before they
    generate: the look is a span that succeeded, and the request is named and counted as the
    GenAI call it is (its usage the ``num_tokens`` the client received)."""
    settings = gateway_settings(traced_engine, collector, tmp_path, admin_api_keys=[WRITE_KEY])
    async with serve_uvicorn(create_app(settings)) as base_url:
        async with httpx.AsyncClient(base_url=base_url, headers={"authorization": f"Bearer {READ_KEY}"},
                                     timeout=DEADLINE) as client:
            generated = await client.post("/generate", json={"prompt": "def add(a, b):", "max_tokens": 5,
                                                             "temperature": 0})
            chatted = await client.post("/chat", json={"messages": [{"role": "user", "content": "Hello"}],
                                                       "max_tokens": 5, "temperature": 0})
            metrics = (await client.get("/metrics", headers={"authorization": f"Bearer {WRITE_KEY}"})).text
    assert generated.status_code == chatted.status_code == 200
    model = traced_engine.model
    for response, operation in ((generated, "text_completion"), (chatted, "chat")):
        spans = await received(collector, response.headers["x-trace-id"], f"{operation} {model}")
        server = next(span for span in spans if span.kind == "SERVER" and span.service == "stack-gateway")
        calls = [span for span in spans if span.kind == "CLIENT"]
        assert [(call.name, call.status) for call in calls] == [("POST /tokenize", 0), (f"{operation} {model}", 0)]
        assert all("error.type" not in span.attributes and span.status == 0 for span in spans)
        assert next(span for span in spans if span.name == "llm_request").parent_id == calls[1].span_id
        for span in (server, calls[1]):
            assert span.attributes["gen_ai.operation.name"] == operation
            assert span.attributes["gen_ai.usage.output_tokens"] == response.json()["num_tokens"]
        assert server.attributes["url.path"] == response.request.url.path
        assert isinstance(server.attributes["gen_ai.request.temperature"], float)
    # ... and counted in the GenAI metrics as the relayed calls are
    for response, operation in ((generated, "text_completion"), (chatted, "chat")):
        labels = (f'gen_ai_operation_name="{operation}",gen_ai_provider_name="vllm",gen_ai_request_model="{model}",'
                  'gen_ai_token_type="output"')
        assert f'gen_ai_client_token_usage_sum{{{labels}}} {float(response.json()["num_tokens"])}' in metrics


async def test_a_client_that_leaves_cuts_the_engine_call_and_its_span_says_so(traced_engine, collector, tmp_path):
    """A streamed chat left after its first chunk, a non-streamed one left while vLLM generates it:
    each engine call span is an error ``client_disconnect``; the stream's server span says how it
    ended, the non-streamed one's status is 499 (nothing was sent)."""
    body = {"model": traced_engine.model, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 1500,
            "ignore_eos": True, "temperature": 0}
    async with serve_uvicorn(create_app(gateway_settings(traced_engine, collector, tmp_path))) as base_url:
        async with fresh_client(base_url) as client:
            headers = {"authorization": f"Bearer {READ_KEY}"}
            async with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True},
                                     headers=headers) as streamed:
                async for _ in streamed.aiter_bytes():
                    break  # the first chunk: then the client leaves
            unary = asyncio.create_task(client.post("/v1/chat/completions", json=body, headers=headers))
            deadline = asyncio.get_running_loop().time() + DEADLINE
            while (await traced_engine.ametrics()).get("vllm:num_requests_running", 0.0) < 1:
                assert asyncio.get_running_loop().time() < deadline, "vLLM never ran the non-streamed request"
            unary.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await unary
            left = await asyncio.to_thread(collector.wait_for, lambda spans: [
                span for span in spans if span.kind == "SERVER" and span.service == "stack-gateway"
                and span.attributes.get("http.response.status_code") == 499], timeout=DEADLINE)
    stream_trace = await asyncio.to_thread(collector.wait_for, lambda spans: [
        span for span in spans if span.trace_id == streamed.headers["x-trace-id"] and span.kind in ("SERVER", "CLIENT")
        and span.service == "stack-gateway"] if len([span for span in spans if span.trace_id == streamed.headers[
            "x-trace-id"] and span.service == "stack-gateway"]) >= 2 else None, timeout=DEADLINE)
    server = next(span for span in stream_trace if span.kind == "SERVER")
    assert server.attributes["gateway.stream.ending"] == "client_disconnect"
    unary_call = next(span for span in collector.trace(left[0].trace_id) if span.kind == "CLIENT")
    for call in (next(span for span in stream_trace if span.kind == "CLIENT"), unary_call):
        assert call.attributes["error.type"] == "client_disconnect" and call.status == 2


# --- a fleet of two: the engine directly, and the same engine through a proxy the test shuts ---------
def fleet_settings(engine: EngineHandle, proxy: TcpProxy, collector: OtlpReceiver, tmp_path) -> Settings:
    return gateway_settings(engine, collector, tmp_path, vllm_base_urls=[proxy.url, engine.base_url],
                            routing_policy="round_robin", engine_poll_interval=60, session_store="memory")


def proxy_for(engine: EngineHandle) -> TcpProxy:
    host, port = engine.base_url.removeprefix("http://").rsplit(":", 1)
    return TcpProxy(host, int(port)).start()


async def test_a_failover_shows_the_failed_attempt_and_the_retry(traced_engine, collector, tmp_path):
    proxy = proxy_for(traced_engine)
    try:
        settings = fleet_settings(traced_engine, proxy, collector, tmp_path)
        async with serve_uvicorn(create_app(settings)) as base_url:
            proxy.stop()  # the proxied engine refuses connections from now on (it still looks ready)
            client = openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key=READ_KEY, max_retries=0)
            traces = []
            for _ in range(2):  # round robin: one of the two goes to the proxied engine first
                raw = await client.chat.completions.with_raw_response.create(
                    model=traced_engine.model, messages=[{"role": "user", "content": "Hi"}], max_tokens=3)
                traces.append(raw.headers["x-trace-id"])
    finally:
        proxy.shutdown()
    spans = [await received(collector, trace_id, f"chat {traced_engine.model}") for trace_id in traces]
    failed_over = [trace for trace in spans if len([span for span in trace if span.kind == "CLIENT"]) == 2]
    assert len(failed_over) == 1
    trace = failed_over[0]
    server = next(span for span in trace if span.kind == "SERVER" and span.service == "stack-gateway")
    first, second = sorted((span for span in trace if span.kind == "CLIENT"),
                           key=lambda span: span.attributes["gateway.engine.attempt"])
    assert first.attributes["gateway.engine.id"] == proxy.url and first.status == 2
    assert first.attributes["error.type"]
    assert second.attributes["gateway.engine.id"] == traced_engine.base_url and second.status != 2
    assert server.attributes["gateway.engine.retries"] == 1
    assert "gateway.engine.failed" in [name for name, _ in server.events]
    vllm = next(span for span in trace if span.name == "llm_request")
    assert vllm.parent_id == second.span_id


async def test_a_continued_stream_shows_its_continuation(traced_engine, collector, tmp_path):
    proxy = proxy_for(traced_engine)
    body = {"model": traced_engine.model, "messages": [{"role": "user", "content": "Tell me a long story."}],
            "max_tokens": 800, "temperature": 0, "ignore_eos": True, "stream": True}
    try:
        settings = fleet_settings(traced_engine, proxy, collector, tmp_path)
        async with serve_uvicorn(create_app(settings)) as base_url, \
                fresh_client(base_url, timeout=DEADLINE) as http:
            headers = {"authorization": f"Bearer {READ_KEY}"}
            async with http.stream("POST", "/v1/chat/completions", json=body, headers=headers) as one, \
                    http.stream("POST", "/v1/chat/completions", json=body, headers=headers) as two:
                readers = [one.aiter_bytes(), two.aiter_bytes()]
                for reader in readers:  # both streams produce (round robin: one on each engine)
                    await anext(reader)
                proxy.stop()  # the proxied engine's stream is cut
                for reader in readers:
                    async for _ in reader:
                        pass
                trace_ids = [one.headers["x-trace-id"], two.headers["x-trace-id"]]
    finally:
        proxy.shutdown()
    name = f"chat {traced_engine.model}"
    traces = [await asyncio.to_thread(collector.wait_for, joined(trace_id, name), timeout=DEADLINE)
              for trace_id in trace_ids]
    continued = [trace for trace in traces
                 if any(event == "gateway.continuation" for span in trace for event, _ in span.events)]
    assert len(continued) == 1
    trace = continued[0]
    print(render(trace, SHOWN))  # the sample in docs/tracing.md (pytest -s)
    server = next(span for span in trace if span.kind == "SERVER" and span.service == "stack-gateway")
    event = next(attrs for name, attrs in server.events if name == "gateway.continuation")
    assert event["gateway.engine.from"] == proxy.url
    calls = sorted((span for span in trace if span.kind == "CLIENT"),
                   key=lambda span: span.attributes["gateway.engine.attempt"])
    assert [call.attributes["gateway.engine.id"] for call in calls] == [proxy.url, traced_engine.base_url]
    assert calls[0].status == 2 and calls[0].attributes["error.type"] == "stream_broken"
    assert server.attributes["gateway.stream.ending"] == "completed"
    assert any(span.name == "llm_request" and span.parent_id == calls[1].span_id for span in trace)
