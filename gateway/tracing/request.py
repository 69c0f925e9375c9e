"""One request's trace: its server span, a client span per engine call, the routing receipt.

Attached to the request's context (``request.put``) by ``Tracing.begin``; the layers that
learn something call the hooks of ``gateway.tracing.hooks``, which find it there. The server
span is named ``{operation} {model}`` once the protocol knows both (``chat qwen3``), and
carries who asked (the key id, never the key; the team), what was asked (the model, the
parameters, numbers only), what came back (usage, finish reasons, time to first token) and
how the gateway served it. Each engine call is a ``CLIENT`` span of the same name, child of
the server span: the engine it went to (``server.address``), why (the routing policy's
reason, the chosen engine's load score and the runner-up's), the attempt; its context is
the ``traceparent`` sent to the engine, so vLLM's own spans hang under it. A failed attempt
ends its span with the failure; a stream continued on another engine ends the broken call's
span and adds a ``gateway.continuation`` event to the server span. Before the engine, flow
control's wait (``queued``: a ``queue`` child span when the request waited) and, beside it, the
session store's flushes of the request's events (``stored``: one event per flush) land here too.

Never a prompt, a completion, a key or an end user's id.

The spans are recorded as plain values (``spans.Span``: a name, times, a dict of attributes, a
list of events) and, when each ends, encoded as OTLP bytes (``otlp_encoding.recorded_field``)
into the SDK batch processor's queue: no SDK span object at all. The SDK's live spans cost
about 100 us per traced request here (two spans, 30 attributes): each ``set_attribute(s)``
takes a lock and re-validates every value, each span a sampler call, a context, limits, locks;
its ``ReadableSpan``s, made when spans ended, about a third of what was left. These values are
the gateway's own (numbers and names it chose; text from a request is cut, e.g. an error
message at 200 characters), under the SDK's default limit of 128 attributes a span. The
sampling decision and the ids are the SDK's (``Tracing.begin``).
"""

from __future__ import annotations

import time
from typing import Any

from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode

from gateway.tracing.conventions import OPERATIONS, json_object, request_attributes, response_attributes
from gateway.tracing.spans import Span

_now = time.time_ns
CLIENT_CLOSED_REQUEST = 499  # (the middleware's status for a client that left before the answer)
STREAM_INTERRUPTED = "stream_interrupted"  # a stream that ended with an error (the GenAI metrics' error_type too)


class RequestTrace:
    __slots__ = ("tracing", "trace_id_value", "span_id", "flags", "trace_state", "parent", "sampled", "recording",
                 "span", "trace_id", "operation", "model", "call", "attempts", "retries", "first_token")

    def __init__(self, tracing, name: str, trace_id: int, span_id: int, flags: int, trace_state,
                 parent: SpanContext | None, sampled: bool, attributes: dict[str, Any]) -> None:
        self.tracing = tracing
        self.trace_id_value = trace_id
        self.span_id = span_id
        self.flags = flags
        self.trace_state = trace_state
        self.parent = parent  # the caller's span (from its traceparent), if any
        self.sampled = sampled  # recorded and exported
        self.recording = sampled  # ... and not ended yet: what's learnt goes on the server span
        # the server span (None: not sampled)
        self.span = Span(tracing.origin, name, SpanKind.SERVER, trace_id, span_id, flags, trace_state,
                         parent.span_id if parent is not None else None, parent is not None, _now(),
                         attributes) if sampled else None
        self.trace_id = format(trace_id, "032x")
        self.operation: str | None = None
        self.model: str | None = None
        self.call: Span | None = None  # the engine call in progress
        self.attempts = 0
        self.retries = 0
        self.first_token = False

    # --- what the protocol asked ----------------------------------------------------------
    def generation(self, path: str, model: str | None, body: bytes | None, *, data: dict | None = None,
                   session_id: str | None = None, streamed: bool = False) -> None:
        """A GenAI call: the span gets its conventional name and the request's parameters
        (``data``: the body already decoded, else it is decoded here, only when recorded)."""
        operation = OPERATIONS.get(path)  # (operation_of, without its call)
        if operation is None:
            return
        self.operation, self.model = operation, model
        if not self.recording:
            return
        span = self.span
        span.name = f"{operation} {model}" if model else operation
        attributes = span.attributes
        attributes.update(self.tracing.conventions.base(operation, model))
        attributes.update(request_attributes(data if data is not None else json_object(body)))
        if streamed:
            attributes["gen_ai.request.stream"] = True
        if session_id is not None:
            attributes["gateway.session.id"] = session_id

    def caller(self, key_id: str, team_id: str | None) -> None:
        if self.recording:
            attributes = self.span.attributes
            attributes["gateway.key_id"] = key_id
            if team_id is not None:
                attributes["gateway.team_id"] = team_id

    # --- before the engine: the queue, the store ----------------------------------------------
    def queued(self, band: str, outcome: str, seconds: float, refusal: str | None = None) -> None:
        """Flow control let the request go (``dispatched``), refused it, or its client ``left`` the queue.

        The server span says the band, the outcome and the wait; a request that waited (or never
        got through) also gets a ``queue`` child span spanning its wait, so it shows where the
        time went. One dispatched at once gets no span (nothing to see, and a span is the cost).
        """
        if not self.recording:
            return
        attributes: dict[str, Any] = {"gateway.queue.band": band, "gateway.queue.outcome": outcome,
                                      "gateway.queue.wait_ms": int(seconds * 1000 + 0.5)}
        if refusal is not None:
            attributes["gateway.queue.refusal"] = refusal
        self.span.attributes.update(attributes)
        if seconds <= 0 and outcome == "dispatched":
            return
        end = _now()
        wait = self._child("queue", SpanKind.INTERNAL, end - int(seconds * 1e9), dict(attributes))
        if refusal is not None:
            wait.status = Status(StatusCode.ERROR, refusal)
        self._emit(wait, end)

    def stored(self, attributes: dict[str, Any], error: str | None) -> None:
        """One flush of the session store wrote this request's events: an event on the server span.

        The flushes after the response ended (a stream's last events, its ending) come when the
        server span is closed: each is a short ``session.write`` child span instead.
        """
        if error is not None:
            attributes["error.type"] = error
        if self.recording:
            self.span.add_event("gateway.session.write", attributes, _now())
            return
        if not self.sampled:
            return
        end = _now()
        write = self._child("session.write", SpanKind.INTERNAL,
                            end - int(attributes["gateway.session.write_ms"] * 1e6), attributes)
        if error is not None:
            write.status = Status(StatusCode.ERROR, error)
        self._emit(write, end)

    # --- the engine calls ----------------------------------------------------------------
    def engine_call(self, engine, method: str, path: str, headers: dict[str, str], router=None) -> dict[str, str]:
        """A call to ``engine`` starts: its span, the routing receipt; the headers with ``traceparent``."""
        previous = self.call
        if previous is not None:  # the previous attempt failed without saying how, or its stream broke
            self._failed(previous, "abandoned", "another engine call followed")
        self.attempts += 1
        headers = dict(headers)
        if not self.recording:  # not sampled (or over): the engine gets the trace, no span is made
            headers["traceparent"] = f"00-{self.trace_id}-{self.span_id:016x}-00"
            return headers
        operation = OPERATIONS.get(path)  # (operation_of, without its call)
        name = f"{operation} {self.model}" if operation and self.model else f"{method} {path}"
        attributes = dict(self.tracing.conventions.base(operation, self.model)) if operation else {}
        _receipt(attributes, engine, router)
        attributes["gateway.engine.attempt"] = self.attempts
        call = self.call = self._child(name, SpanKind.CLIENT, _now(), attributes)
        headers["traceparent"] = f"00-{self.trace_id}-{call.span_id:016x}-{self.flags:02x}"
        if self.trace_state:
            headers["tracestate"] = self.trace_state.to_header()
        return headers

    def engine_failed(self, kind: str, message: str) -> None:
        """The engine call in progress failed before answering (retried, or the request's error)."""
        call = self.call
        if call is None:
            return
        self.call = None
        self.retries += 1
        self._failed(call, kind, message)
        if self.recording:
            self.span.add_event("gateway.engine.failed", {"error.type": kind}, _now())

    def first_bytes(self) -> None:
        """The stream's first token arrived."""
        if self.first_token or not self.recording:
            return
        self.first_token = True
        now = _now()
        span = self.span
        span.add_event("gen_ai.first_token", None, now)
        span.attributes["gen_ai.response.time_to_first_chunk"] = (now - span.start) / 1e9

    def continuing(self, engine_id: str | None, cause: str) -> None:
        """The stream's engine broke: the run goes on elsewhere (its next engine call follows)."""
        call = self.call
        if call is not None:
            self.call = None
            self._failed(call, "stream_broken", cause)
        if self.recording:
            self.span.add_event("gateway.continuation", {"gateway.engine.from": engine_id or "none",
                                                         "gateway.continuation.reason": cause[:200]}, _now())

    # --- what came back -------------------------------------------------------------------
    def answered(self, status: int, answer: bytes | None) -> None:
        """A non-streamed call's answer (its usage and finish reasons on both spans)."""
        attributes = {}
        if answer is not None and status < 400 and self.recording:
            attributes = response_attributes(self.tracing.conventions, answer)
        kind = None if status < 400 else f"http_{status}"
        self._settle(attributes, kind, kind)

    def stream_ended(self, how: str, usage: dict | None, finish_reason: str | None, error: str | None) -> None:
        attributes: dict[str, Any] = {}
        if self.recording:
            attributes = self.tracing.conventions.usage(usage)
            if finish_reason is not None:
                attributes["gen_ai.response.finish_reasons"] = (finish_reason,)  # (as the SDK keeps a sequence)
            if self.model:
                attributes["gen_ai.response.model"] = self.model  # (vLLM answers with the served name asked)
            attributes["gateway.stream.ending"] = how
        if how == "error":  # (the word the GenAI metrics' error_type has; the message is the status's)
            self._settle(attributes, STREAM_INTERRUPTED, error or "the stream ended with an error")
        elif how == "client_disconnect":
            self._settle(attributes, how, "the client left during the stream")
        else:
            self._settle(attributes, None, None)

    def _settle(self, attributes: dict[str, Any], kind: str | None, message: str | None) -> None:
        """The engine call ends (``kind``: its ``error.type``, a short fixed word; ``message``: the status's)."""
        call, self.call = self.call, None
        if call is not None:
            call.attributes.update(attributes)
            if kind is not None:  # (an engine's 4xx too: a client span's error, as HTTP's conventions say)
                call.attributes["error.type"] = kind
                call.status = Status(StatusCode.ERROR, (message or kind)[:200])
            self._emit(call, _now())
        if attributes and self.recording:
            self.span.attributes.update(attributes)

    def end(self, status: int, route: str | None = None) -> None:
        """The request ended with ``status``: the server span ends. ``route``: the route's template
        (``/v1/files/{file_id}``; None: no route matched), the name of a span that is no GenAI call:
        ``{method} {route}``, else ``{method}`` (HTTP's conventions: never the raw path, whose ids would
        make a name per request in a backend that counts spans by name)."""
        call, self.call = self.call, None
        if call is not None:
            if status >= 500:
                self._failed(call, f"http_{status}", "the request failed")
            elif status == CLIENT_CLOSED_REQUEST:  # the engine call was cut: its answer never came
                self._failed(call, "client_disconnect", "the client left before the answer")
            elif status >= 400:  # the engine refused (a stream's 4xx before its first event)
                self._failed(call, f"http_{status}", "the engine refused the request")
            else:
                self._emit(call, _now())
        if not self.recording:
            return
        self.recording = False
        span = self.span
        attributes = span.attributes
        attributes["http.response.status_code"] = status
        attributes["gateway.engine.retries"] = self.retries
        if route is not None:
            attributes["http.route"] = route
        if self.operation is None:
            method = attributes["http.request.method"]
            span.name = f"{method} {route}" if route is not None and method != "_OTHER" \
                else "HTTP" if method == "_OTHER" else method
        if status >= 500:
            span.status = Status(StatusCode.ERROR)
            attributes["error.type"] = str(status)
        elif status < 400 and attributes.get("gateway.stream.ending") == "error":  # a 200 whose stream broke
            span.status = Status(StatusCode.ERROR, "the stream ended with an error")
            attributes["error.type"] = STREAM_INTERRUPTED
        span.end = _now()
        self.tracing.finished(span)

    # --- the child spans -------------------------------------------------------------------
    def _child(self, name: str, kind: SpanKind, start: int, attributes: dict[str, Any]) -> Span:
        return Span(self.tracing.origin, name, kind, self.trace_id_value, self.tracing.new_span_id(), self.flags,
                    self.trace_state, self.span_id, False, start, attributes)

    def _failed(self, child: Span, kind: str, message: str) -> None:
        child.attributes["error.type"] = kind
        child.status = Status(StatusCode.ERROR, message[:200])
        self._emit(child, _now())

    def _emit(self, child: Span, end: int) -> None:
        """``child`` ended at ``end``: to the batch processor (when this trace is sampled)."""
        if self.sampled:
            child.end = end
            self.tracing.finished(child)


def _receipt(attributes: dict[str, Any], engine, router) -> None:
    """Why this engine, into ``attributes``: the policy and its reason, the engine's load score and the runner-up's."""
    attributes.update(_engine_attributes(engine))
    if router is None:
        attributes["gateway.routing.reason"] = "pinned"
        return
    attributes["gateway.routing.policy"] = router.policy.name
    reason = getattr(router, "last_reason", None)
    if reason is not None:
        attributes["gateway.routing.reason"] = reason
    attributes["gateway.routing.prefix_affinity_hit"] = bool(getattr(router, "last_affinity_hit", False))
    attributes["gateway.routing.score"] = float(engine.score())
    candidates = getattr(router, "last_candidates", ())
    others = [other.score() for other in candidates if other is not engine] if candidates else ()
    if others:
        attributes["gateway.routing.runner_up_score"] = float(min(others))
    attributes["gateway.routing.candidates"] = len(others) + 1


_engines: dict[str, dict[str, Any]] = {}  # engine id -> its id, address and port as attributes


def _engine_attributes(engine) -> dict[str, Any]:
    """The engine's id, host and port: its URL parsed once per engine id (a dict kept, never to change)."""
    attributes = _engines.get(engine.id)
    if attributes is None:
        attributes = {"gateway.engine.id": engine.id}
        url = engine.url("/")
        if url.host:
            attributes["server.address"] = url.host
        if url.port:
            attributes["server.port"] = url.port
        if len(_engines) >= 1024:  # (a fleet's engines are few; a bound all the same)
            _engines.clear()
        _engines[engine.id] = attributes
    return attributes
