"""An OTLP/HTTP trace receiver for tests: the real protobuf payloads, decoded with ``opentelemetry-proto``.

No collector binary exists here, so a test receives the spans itself: ``POST /v1/traces``
with an ``ExportTraceServiceRequest`` (what the SDK's exporter and vLLM's send), decoded
and kept as :class:`Span` records. ``wait_for`` blocks until a predicate over the spans holds,
with a deadline (a condition variable: no polling sleeps). ``hang()`` makes it a collector
that takes the request and never answers (until the test ends), for the tests of a stuck
collector; ``exports_started`` counts the export requests that reached it.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}


@dataclass
class Span:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: str
    attributes: dict
    events: list[tuple[str, dict]]
    status: int  # 0 unset, 1 ok, 2 error
    service: str
    resource: dict = field(default_factory=dict)


def _value(any_value):
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [_value(item) for item in any_value.array_value.values]
    if kind is None:
        return None
    return getattr(any_value, kind)


def _attributes(pairs) -> dict:
    return {pair.key: _value(pair.value) for pair in pairs}


class OtlpReceiver:
    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.exports_started = 0
        self.raw_requests = 0
        self._changed = threading.Condition()
        self._release = threading.Event()
        self._hanging = False
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                with receiver._changed:
                    receiver.exports_started += 1
                    receiver._changed.notify_all()
                if receiver._hanging:
                    receiver._release.wait()
                    return
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                receiver._take(body)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1/traces"

    def start(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def close(self) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()

    def hang(self) -> None:
        """From now on take export requests and never answer them."""
        self._hanging = True

    def _take(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        spans = []
        for resource_spans in request.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    spans.append(Span(
                        name=span.name, trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                        parent_id=span.parent_span_id.hex(), kind=KINDS.get(span.kind, str(span.kind)),
                        attributes=_attributes(span.attributes),
                        events=[(event.name, _attributes(event.attributes)) for event in span.events],
                        status=span.status.code, service=str(resource.get("service.name", "")), resource=resource))
        with self._changed:
            self.raw_requests += 1
            self.spans.extend(spans)
            self._changed.notify_all()

    def wait_for(self, predicate: Callable[[list[Span]], object], *, timeout: float = 30.0) -> object:
        """Block until ``predicate(spans)`` is truthy (its value is returned), or fail at the deadline."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = predicate(list(self.spans))
                if found:
                    return found
                left = deadline - time.monotonic()
                if left <= 0:
                    names = sorted({(span.service, span.name) for span in self.spans})
                    raise AssertionError(f"no such spans after {timeout}s; received: {names}")
                self._changed.wait(left)

    def wait_for_exports(self, count: int, *, timeout: float = 30.0) -> None:
        self.wait_for(lambda _spans: self.exports_started >= count, timeout=timeout)

    def trace(self, trace_id: str) -> list[Span]:
        with self._changed:
            return [span for span in self.spans if span.trace_id == trace_id]


def render(spans: list[Span], keys: tuple[str, ...] = ()) -> str:
    """A trace as an indented tree (parents first), each span with its service, kind, status, ``keys`` and events."""
    ids = {span.span_id for span in spans}
    children: dict[str, list[Span]] = {}
    for span in spans:
        children.setdefault(span.parent_id if span.parent_id in ids else "", []).append(span)
    lines: list[str] = []

    def walk(parent: str, depth: int) -> None:
        for span in children.get(parent, []):
            shown = " ".join(f"{key}={span.attributes[key]}" for key in keys if key in span.attributes)
            status = " ERROR" if span.status == 2 else ""
            lines.append(f"{'  ' * depth}{span.name}  [{span.service} {span.kind}{status}]  {shown}".rstrip())
            for name, attributes in span.events:
                detail = " ".join(f"{key}={value}" for key, value in attributes.items())
                lines.append(f"{'  ' * depth}  event {name} {detail}".rstrip())
            walk(span.span_id, depth + 1)

    walk("", 0)
    return "\n".join(lines)
