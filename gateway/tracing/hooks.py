"""The calls the request path makes into tracing: one per place, each a ``None`` check when off.

The middleware, the engine client, the stream runner, the non-streamed relay and the log
formatter each call one function here with the request's context; each finds the request's
:class:`RequestTrace` (``request.get``) and returns at once when there is none (tracing
off, a probe, work with no request). The logic stays in this package; the shared files
change by a line each.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gateway.tracing.conventions import json_object, operation_of
from gateway.tracing.metrics import GenAIMetrics
from gateway.tracing.request import STREAM_INTERRUPTED, RequestTrace


def trace_of(request) -> RequestTrace | None:
    return request.get(RequestTrace) if request is not None else None


def recorded(request) -> bool:
    """Whether ``request``'s spans are recorded (traced and sampled): worth reading more for."""
    trace = request.get(RequestTrace)
    return trace is not None and trace.recording


def trace_id(request) -> str | None:
    """The request's trace id (for its log lines), if it is traced."""
    trace = request.get(RequestTrace)
    return trace.trace_id if trace is not None else None


def request_ended(trace: RequestTrace | None, request, status: int, route: str | None = None) -> None:
    """The middleware's end of a request: who asked, the status, the route's template (None: no
    route matched), the server span ended."""
    if trace is None:
        return
    principal = request.principal
    if principal is not None:
        trace.caller(principal.key_id, getattr(principal, "team_id", None))
    trace.end(status, route)


def engine_headers(request, engine, method: str, path: str, headers: dict[str, str],
                   router=None) -> dict[str, str]:
    """A call to ``engine`` starts (``router``: it chose; None: pinned): its span; headers with ``traceparent``."""
    trace = request.get(RequestTrace) if request is not None else None
    if trace is None:
        return headers
    return trace.engine_call(engine, method, path, headers, router)


def engine_failed(request, error) -> None:
    """The engine call in progress failed (an ``EngineError``: its ``kind`` and message)."""
    trace = request.get(RequestTrace) if request is not None else None
    if trace is not None:
        trace.engine_failed(getattr(error, "kind", "error"), str(getattr(error, "message", error)))


def on_first_bytes(request, then: Callable[[], None] | None) -> Callable[[], None] | None:
    """``then`` (the first-token timer), and the trace's first-token mark when traced."""
    trace = request.get(RequestTrace) if request is not None else None
    if trace is None:
        return then
    if then is None:
        return trace.first_bytes

    def both() -> None:
        then()
        trace.first_bytes()

    return both


def stream_started(request, call) -> None:
    """A run starts (``call``: its ``StreamCall``)."""
    trace = request.get(RequestTrace)
    if trace is not None:
        model = call.model if isinstance(call.model, str) else None
        data = request.parsed(call.body) if trace.recording else None  # the protocol's parse, when it kept one
        trace.generation(call.path, model, call.body, data=data, session_id=call.session_id, streamed=True)


def stream_ended(request, result, call, metrics: GenAIMetrics) -> None:
    """A run ended (``result``: its ``StreamResult``): the GenAI metrics, and the trace if any."""
    metrics.observe(call.path, call.model, result.counted_usage(), time.perf_counter() - request.started,
                    STREAM_INTERRUPTED if result.how == "error" else None)
    trace = request.get(RequestTrace)
    if trace is not None:
        trace.stream_ended(result.how, result.usage, result.finish_reason, result.error)


def continuing(request, engine, cause: str) -> None:
    """A run's engine broke and it goes on on another (``engine``: the one that broke)."""
    trace = request.get(RequestTrace)
    if trace is not None:
        trace.continuing(engine.id if engine is not None else None, cause)


def unary_started(request, path: str, body: bytes | None) -> None:
    """A non-streamed relay starts: a GenAI call if its path is one."""
    trace = request.get(RequestTrace)
    if trace is not None and trace.recording:
        data = request.parsed(body)  # the protocol's parse of this very body, when it kept one
        if data is None:
            data = json_object(body)  # (once: its model and its parameters)
        model = data.get("model") if data is not None else None
        trace.generation(path, model if isinstance(model, str) else None, body, data=data or {})


def unary_answered(request, status: int, answer: bytes, path: str, route, metrics: GenAIMetrics,
                   usage: dict | None) -> None:
    """A non-streamed call's answer (``usage``: its usage object, decoded by the relay): the GenAI
    metrics, and the trace if any."""
    if operation_of(path) is not None:
        metrics.observe(path, route.model if route is not None else None, usage,
                        time.perf_counter() - request.started, f"http_{status}" if status >= 400 else None)
    trace = request.get(RequestTrace)
    if trace is not None:
        trace.answered(status, answer)



def own_call_started(request, path: str, payload: dict) -> None:
    """The gateway calls the engine for its own use (``post_json``: the code API's generations, a
    ``/tokenize`` look): a GenAI call names a server span that no protocol named yet (``/generate``
    is a ``text_completion``, the code API's ``/chat`` a ``chat``)."""
    trace = request.get(RequestTrace) if request is not None else None
    if trace is not None and trace.operation is None and operation_of(path) is not None:
        model = payload.get("model")
        trace.generation(path, model if isinstance(model, str) else None, None, data=payload)


def own_call_answered(request, path: str, model: object, status: int, answer: bytes,
                      metrics: GenAIMetrics | None) -> None:
    """Such a call answered: a GenAI call is counted in the GenAI metrics (the code API's
    generations, as the relayed ones are); its span ends (a GenAI call's usage on both spans), not
    left to be taken for an abandoned one by the next engine call."""
    if request is None:
        return
    generation = operation_of(path) is not None
    if generation and metrics is not None:
        data = json_object(answer) if status < 400 else None
        metrics.observe(path, model, data.get("usage") if data is not None else None,
                        time.perf_counter() - request.started, f"http_{status}" if status >= 400 else None)
    trace = request.get(RequestTrace)
    if trace is not None:
        trace.answered(status, answer if generation else None)
