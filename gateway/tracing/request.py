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
"""

from __future__ import annotations

import time
from typing import Any

from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from gateway.tracing.conventions import json_object, operation_of, request_attributes, response_attributes


class RequestTrace:
    __slots__ = ("tracing", "span", "context", "trace_id", "operation", "model", "call", "attempts", "retries",
                 "opened_ns", "first_token")

    def __init__(self, tracing, span: Span, context) -> None:
        self.tracing = tracing
        self.span = span
        self.context = context  # the server span as a parent
        self.trace_id = format(span.get_span_context().trace_id, "032x")
        self.operation: str | None = None
        self.model: str | None = None
        self.call: Span | None = None  # the engine call in progress
        self.attempts = 0
        self.retries = 0
        self.opened_ns = 0
        self.first_token = False

    @property
    def recording(self) -> bool:
        return self.span.is_recording()

    # --- what the protocol asked ----------------------------------------------------------
    def generation(self, path: str, model: str | None, body: bytes | None, *, data: dict | None = None,
                   session_id: str | None = None, streamed: bool = False) -> None:
        """A GenAI call: the span gets its conventional name and the request's parameters
        (``data``: the body already decoded, else it is decoded here, only when recorded)."""
        operation = operation_of(path)
        if operation is None:
            return
        self.operation, self.model = operation, model
        span = self.span
        if not span.is_recording():
            return
        span.update_name(f"{operation} {model}" if model else operation)
        attributes = self.tracing.conventions.base(operation, model)
        attributes.update(request_attributes(data if data is not None else json_object(body)))
        if streamed:
            attributes["gen_ai.request.stream"] = True
        if session_id is not None:
            attributes["gateway.session.id"] = session_id
        span.set_attributes(attributes)

    def caller(self, key_id: str, team_id: str | None) -> None:
        if self.span.is_recording():
            attributes = {"gateway.key_id": key_id}
            if team_id is not None:
                attributes["gateway.team_id"] = team_id
            self.span.set_attributes(attributes)

    # --- before the engine: the queue, the store ----------------------------------------------
    def queued(self, band: str, outcome: str, seconds: float, refusal: str | None = None) -> None:
        """Flow control let the request go (``dispatched``), refused it, or its client ``left`` the queue.

        The server span says the band, the outcome and the wait; a request that waited (or never
        got through) also gets a ``queue`` child span spanning its wait, so it shows where the
        time went. One dispatched at once gets no span (nothing to see, and a span is the cost).
        """
        span = self.span
        if not span.is_recording():
            return
        attributes: dict[str, Any] = {"gateway.queue.band": band, "gateway.queue.outcome": outcome,
                                      "gateway.queue.wait_ms": int(seconds * 1000 + 0.5)}
        if refusal is not None:
            attributes["gateway.queue.refusal"] = refusal
        span.set_attributes(attributes)
        if seconds <= 0 and outcome == "dispatched":
            return
        end = time.time_ns()
        wait = self.tracing.tracer.start_span("queue", context=self.context, kind=SpanKind.INTERNAL,
                                              start_time=end - int(seconds * 1e9), attributes=attributes)
        if refusal is not None:
            wait.set_status(Status(StatusCode.ERROR, refusal))
        wait.end(end_time=end)

    def stored(self, attributes: dict[str, Any], error: str | None) -> None:
        """One flush of the session store wrote this request's events: an event on the server span.

        The flushes after the response ended (a stream's last events, its ending) come when the
        server span is closed: each is a short ``session.write`` child span instead.
        """
        if error is not None:
            attributes["error.type"] = error
        span = self.span
        if span.is_recording():
            span.add_event("gateway.session.write", attributes)
            return
        if not span.get_span_context().trace_flags.sampled:
            return
        end = time.time_ns()
        write = self.tracing.tracer.start_span("session.write", context=self.context, kind=SpanKind.INTERNAL,
                                               start_time=end - int(attributes["gateway.session.write_ms"] * 1e6),
                                               attributes=attributes)
        if error is not None:
            write.set_status(Status(StatusCode.ERROR, error))
        write.end(end_time=end)

    # --- the engine calls ----------------------------------------------------------------
    def engine_call(self, engine, method: str, path: str, headers: dict[str, str], router=None) -> dict[str, str]:
        """A call to ``engine`` starts: its span, the routing receipt; the headers with ``traceparent``."""
        previous = self.call
        if previous is not None:  # the previous attempt failed without saying how, or its stream broke
            _failed(previous, "abandoned", "another engine call followed")
        self.attempts += 1
        if not self.span.is_recording():  # not sampled: the engine gets the trace, no span is made
            context = self.span.get_span_context()
            headers = dict(headers)
            headers["traceparent"] = f"00-{context.trace_id:032x}-{context.span_id:016x}-00"
            return headers
        operation = operation_of(path)
        name = f"{operation} {self.model}" if operation and self.model else f"{method} {path}"
        attributes: dict[str, Any] = {}
        if self.span.is_recording():
            attributes = self.tracing.conventions.base(operation, self.model) if operation else {}
            attributes.update(_receipt(engine, router))
            attributes["gateway.engine.attempt"] = self.attempts
        call = self.tracing.tracer.start_span(name, context=self.context, kind=SpanKind.CLIENT, attributes=attributes)
        self.call = call
        self.opened_ns = 0
        context = call.get_span_context()
        headers = dict(headers)
        headers["traceparent"] = f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
        if context.trace_state:
            headers["tracestate"] = context.trace_state.to_header()
        return headers

    def engine_failed(self, kind: str, message: str) -> None:
        """The engine call in progress failed before answering (retried, or the request's error)."""
        call = self.call
        if call is None:
            return
        self.call = None
        self.retries += 1
        _failed(call, kind, message)
        if self.span.is_recording():
            self.span.add_event("gateway.engine.failed", {"error.type": kind})

    def first_bytes(self) -> None:
        """The stream's first token arrived."""
        if self.first_token or not self.span.is_recording():
            return
        self.first_token = True
        self.span.add_event("gen_ai.first_token")
        start = getattr(self.span, "start_time", None)
        if start:
            self.span.set_attribute("gen_ai.response.time_to_first_chunk", (time.time_ns() - start) / 1e9)

    def continuing(self, engine_id: str | None, cause: str) -> None:
        """The stream's engine broke: the run goes on elsewhere (its next engine call follows)."""
        call = self.call
        if call is not None:
            self.call = None
            _failed(call, "stream_broken", cause)
        if self.span.is_recording():
            self.span.add_event("gateway.continuation", {"gateway.engine.from": engine_id or "none",
                                                        "gateway.continuation.reason": cause[:200]})

    # --- what came back -------------------------------------------------------------------
    def answered(self, status: int, answer: bytes | None) -> None:
        """A non-streamed call's answer (its usage and finish reasons on both spans)."""
        attributes = {}
        if answer is not None and status < 400 and self.span.is_recording():
            attributes = response_attributes(self.tracing.conventions, answer)
        self._settle(attributes, error=None if status < 400 else f"http_{status}")

    def stream_ended(self, how: str, usage: dict | None, finish_reason: str | None, error: str | None) -> None:
        attributes: dict[str, Any] = {}
        if self.span.is_recording():
            attributes = self.tracing.conventions.usage(usage)
            if finish_reason is not None:
                attributes["gen_ai.response.finish_reasons"] = [finish_reason]
            if self.model:
                attributes["gen_ai.response.model"] = self.model  # (vLLM answers with the served name asked)
            attributes["gateway.stream.ending"] = how
        self._settle(attributes, error=error if how == "error" else None)

    def _settle(self, attributes: dict[str, Any], *, error: str | None) -> None:
        call, self.call = self.call, None
        if call is not None:
            if attributes:
                call.set_attributes(attributes)
            if error is not None:
                call.set_status(Status(StatusCode.ERROR, error[:200]))
            call.end()
        if attributes:
            self.span.set_attributes(attributes)

    def end(self, status: int) -> None:
        """The request ended with ``status``."""
        call, self.call = self.call, None
        if call is not None:
            if status >= 500:
                _failed(call, f"http_{status}", "the request failed")
            else:
                call.end()
        span = self.span
        if span.is_recording():
            attributes = {"http.response.status_code": status, "gateway.engine.retries": self.retries}
            if status >= 500:
                span.set_status(Status(StatusCode.ERROR))
                attributes["error.type"] = str(status)
            span.set_attributes(attributes)
        span.end()


def _failed(span: Span, kind: str, message: str) -> None:
    span.set_attribute("error.type", kind)
    span.set_status(Status(StatusCode.ERROR, message[:200]))
    span.end()


def _receipt(engine, router) -> dict[str, Any]:
    """Why this engine: the policy and its reason, the engine's load score and the runner-up's."""
    attributes: dict[str, Any] = {"gateway.engine.id": engine.id}
    url = engine.url("/")
    if url.host:
        attributes["server.address"] = url.host
    if url.port:
        attributes["server.port"] = url.port
    if router is None:
        attributes["gateway.routing.reason"] = "pinned"
        return attributes
    attributes["gateway.routing.policy"] = router.policy.name
    reason = getattr(router, "last_reason", None)
    if reason is not None:
        attributes["gateway.routing.reason"] = reason
    attributes["gateway.routing.prefix_affinity_hit"] = bool(getattr(router, "last_affinity_hit", False))
    attributes["gateway.routing.score"] = float(engine.score())
    others = [other.score() for other in getattr(router, "last_candidates", ()) if other is not engine]
    if others:
        attributes["gateway.routing.runner_up_score"] = float(min(others))
    attributes["gateway.routing.candidates"] = len(others) + 1
    return attributes
