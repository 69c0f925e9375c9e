"""Where a traced request's tracing CPU goes, in this process: the request path, the export, the encoding.

    python -m bench.tracing_path [--requests 4000] [--rounds 5] [--ratio 1]

Runs the tracing calls one traced non-streamed chat request makes (the middleware's begin, flow
control's dispatch, the relay's start, the engine call with its routing receipt, the answer, the
end), with the gateway's real ``Tracing`` exporting over OTLP/HTTP to a sink that answers at
once; CPU time of this thread per request (the request path: the event loop's share; since
2026-12-06 04:20 UTC it includes the spans' encoding, done as each span ends), and of the
exporter's calls per request (the SDK's export thread, and ``force_flush`` here). Then one
batch of those spans encoded by the SDK's encoder (protobuf objects, from the SDK's
``ReadableSpan``s) and by the gateway's (``gateway/tracing/otlp_encoding.py``, from the spans
as its exporters get them). The median over rounds; ``bench.tracing`` measures the
whole gateway process against tracing off.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from http.server import ThreadingHTTPServer
from types import SimpleNamespace

import orjson
from prometheus_client import CollectorRegistry
from yarl import URL

from bench.tracing import Sink
from gateway.config import Settings
from gateway.http.context import RequestContext
from gateway.tracing import hooks
from gateway.tracing.metrics import GenAIMetrics
from gateway.tracing.provider import Tracing, otlp_exporter

PATH = "/v1/chat/completions"
BODY = orjson.dumps({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16,
                     "stream": False})
ANSWER = orjson.dumps({"id": "chatcmpl-1", "object": "chat.completion", "model": "fake-model",
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": "x" * 40},
                                    "finish_reason": "length"}],
                       "usage": {"prompt_tokens": 5, "completion_tokens": 16, "total_tokens": 21}})
SCOPE = {"type": "http", "path": PATH, "method": "POST",
         "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")]}
PRINCIPAL = SimpleNamespace(key_id="886e7e8fd7788f41", team_id=None)


class Engine:
    id = "http://127.0.0.1:8100"

    def url(self, path: str) -> URL:
        return URL(self.id + path)

    def score(self) -> float:
        return 1.0


ROUTER = SimpleNamespace(policy=SimpleNamespace(name="least_load"), last_reason="least_load",
                         last_affinity_hit=False, last_candidates=())
ENGINE = Engine()
METRICS = GenAIMetrics(CollectorRegistry())


# Each request its own id and its answer's (as in a gateway: values an encoder cannot reuse).
REQUEST_IDS = [f"{n:024x}" for n in range(1 << 14)]
ANSWERS = [ANSWER.replace(b"chatcmpl-1", f"chatcmpl-{n:024x}".encode()) for n in range(1 << 14)]
_next = iter(range(1 << 62))


def one_request(tracing: Tracing) -> None:
    n = next(_next) & ((1 << 14) - 1)
    request = RequestContext(REQUEST_IDS[n], scope=SCOPE, principal=PRINCIPAL)
    trace = tracing.begin(request, SCOPE)
    trace.queued("interactive", "dispatched", 0.0)
    hooks.unary_started(request, PATH, BODY)
    hooks.engine_headers(request, ENGINE, "POST", PATH, {"content-type": "application/json"}, ROUTER)
    trace.answered(200, ANSWERS[n])
    hooks.request_ended(trace, request, 200)


def measure(args: argparse.Namespace) -> str:
    sink = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    settings = Settings(otel_exporter_otlp_traces_endpoint=f"http://127.0.0.1:{sink.server_address[1]}/v1/traces",
                        otel_traces_sampler_arg=args.ratio, otel_bsp_max_queue_size=4 * args.requests)
    exporter = otlp_exporter(settings)
    exported = [0.0]  # CPU seconds inside the exporter, whichever thread called it
    export = exporter.export

    def timed(spans):
        began = time.thread_time()
        try:
            return export(spans)
        finally:
            exported[0] += time.thread_time() - began

    exporter.export = timed
    tracing = Tracing.from_settings(settings, exporter=exporter)
    try:
        for _ in range(args.requests // 8):  # warm-up
            one_request(tracing)
        tracing.force_flush()
        exported[0] = 0.0
        path, export_cpu = [], []
        for _ in range(args.rounds):
            began = time.thread_time()
            for _ in range(args.requests):
                one_request(tracing)
            path.append((time.thread_time() - began) / args.requests * 1e6)
            before = exported[0]
            tracing.force_flush()
            export_cpu.append((exported[0] - before) / args.requests * 1e6)
        sdk, ours = encodings(tracing)
    finally:
        tracing.shutdown()
        sink.shutdown()
    return (f"tracing CPU per traced non-streamed request (us, median of {args.rounds} rounds of {args.requests}, "
            f"ratio {args.ratio}):\n"
            f"  request path (event loop): {statistics.median(path):.1f}   rounds: "
            + ", ".join(f"{value:.1f}" for value in path) + "\n"
            f"  export (encoding + OTLP/HTTP post): {statistics.median(export_cpu):.1f}   rounds: "
            + ", ".join(f"{value:.1f}" for value in export_cpu) + "\n"
            f"  encoding alone, per request: SDK encoder {sdk:.1f}, gateway encoder {ours:.1f}\n")


def encodings(tracing: Tracing) -> tuple[float, float]:
    """CPU per request to encode 256 requests' spans: the SDK's encoder (with serializing) and the gateway's."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    try:
        from gateway.tracing.otlp_encoding import OtlpEncoder
    except ImportError:  # a tree before it (PYTHONPATH=<older checkout>)
        OtlpEncoder = None

    spans = []

    class Keep(SpanExporter):
        takes_recorded_spans = True  # the gateway's own spans (``spans.Span``), before their encoding

        def export(self, batch):
            spans.extend(batch)
            return SpanExportResult.SUCCESS

    kept = Tracing.from_settings(Settings(otel_exporter_otlp_traces_endpoint="http://127.0.0.1:9/v1/traces"),
                                 exporter=Keep())
    try:
        for _ in range(256):
            one_request(kept)
        kept.force_flush()
    finally:
        kept.shutdown()
    encoder = OtlpEncoder() if OtlpEncoder is not None else None
    readable = [span.readable() if hasattr(span, "readable") else span for span in spans]  # the SDK's spans
    sdk, ours = [], [float("nan")]
    for _ in range(5):
        began = time.thread_time()
        encode_spans(readable).SerializePartialToString()
        sdk.append((time.thread_time() - began) / 256 * 1e6)
        if encoder is not None:
            began = time.thread_time()
            encoder.encode(spans)
            ours.append((time.thread_time() - began) / 256 * 1e6)
    return statistics.median(sdk), statistics.median(ours[1:] or ours)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ratio", type=float, default=1.0)
    print(measure(parser.parse_args()))
