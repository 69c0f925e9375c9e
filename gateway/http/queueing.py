"""Flow control on the request path: a request acquires its place before its engine request opens.

The one home of how an HTTP request meets ``gateway.flow``; the relays call it once per place:

- ``open_stream`` (the stream runner) and ``request`` (non-streamed relays, and the batches'
  executor through ``band=``) acquire a grant, then open the engine request. A request queued
  while its client leaves is cancelled by the caller's disconnect watcher: it leaves the queue at
  once (``FlowControl.acquire``);
- ``release`` gives the grant back with the tokens served (the stream runner, when its run ends;
  ``request`` itself);
- ``engine_headers`` (the engine client, each attempt): the request starts on its grant's engine
  (``granted_engine``); an attempt on another one (a failover, a continuation) moves the grant
  there; and the engines running vLLM's priority scheduler get the band's ``X-Vllm-Priority``.

Only the generating routes queue (``QUEUED_PATHS``); a tokenize or a model list never waits.
What a request carries once granted (``Queued``) is attached to its context
(``RequestContext.put``). Its wait is engine time (it is left out of ``X-Gateway-Added-Ms``), and
goes out as ``x-queue-wait-ms``, in the access log's ``queue_ms`` and, traced, as the server span's
``gateway.queue.*`` attributes and a ``queue`` child span when it waited (docs/tracing.md).

The HTTP answers live here too: a refusal by the queue is 429 when the request's own key (or
team) was the limit, so its client should send less, and 503 when the fleet is full, so any
client should wait; both with ``Retry-After``. A request that names an unknown priority band is
a 400 naming the field (``x-priority``, ``priority``).
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import orjson

from gateway.flow import errors
from gateway.flow.bands import (
    BODY_FIELD,
    PRIORITY_HEADER,
    Band,
    InvalidBand,
    engine_priority_header,
    requested_band,
    resolve_band,
)
from gateway.flow.control import FlowControl
from gateway.flow.demand import Demand, Grant, estimated_tokens
from gateway.flow.errors import QueueRefused
from gateway.http.admission import Admission, Slot
from gateway.http.context import RequestContext
from gateway.http.errors import GatewayError
from gateway.tracing.hooks import trace_of

_CODES = {errors.TIMEOUT: "queue_timeout", errors.DISPLACED: "queue_displaced"}
QUEUED_PATHS = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/responses"})
# The client routes (POST) whose requests queue: the middleware's admission leaves their in-flight caps
# to flow control (``Admission.defer``). A route missing here still works: its request is refused at
# the caps at once, and hands its admission slot over if it queues.
QUEUED_ROUTES = QUEUED_PATHS | {"/chat/completions", "/completions", "/responses", "/v1/v1/messages",
                                 "/generate", "/generate/raw", "/chat"}  # (the code API's: each one engine call)
QUEUE_WAIT_HEADER = "x-queue-wait-ms"
_HEADER = PRIORITY_HEADER.encode()
# What a request may ask to generate, under each protocol's name for it: the estimate's second half.
_MAX_TOKENS = re.compile(rb'"max_(?:completion_|output_)?tokens"\s*:\s*(\d{1,9})')
# A served request's tokens from its usage, in either protocol's words (OpenAI's, Anthropic's/Responses').
_TOTAL = re.compile(rb'"total_tokens"\s*:\s*(\d{1,12})')
_IN_OUT = re.compile(rb'"(?:input|output)_tokens"\s*:\s*(\d{1,12})')


class QueueRefusal(GatewayError):
    """The queue refused the request (429: its own limit; 503: the fleet is full): no engine was asked.

    Counted as the gateway's refusal (``gateway_rejected_total{reason=<code>}``), never as an upstream error.
    """


def refusal_error(refusal: QueueRefused) -> QueueRefusal:
    status = 429 if refusal.own_limit else 503
    return QueueRefusal(status, refusal.message, code=_CODES.get(refusal.reason, refusal.reason),
                        headers={"retry-after": str(refusal.retry_after)})


def band_error(problem: InvalidBand) -> GatewayError:
    return GatewayError(400, str(problem), param=problem.field, code="invalid_priority")


class LeftQueue:
    """Attached to a request whose client left while it waited in the queue: no engine was asked."""

    __slots__ = ()


LEFT_QUEUE = LeftQueue()


def left_queue(request: RequestContext) -> bool:
    """Whether ``request`` left the queue without a grant (its client gone): it never reached an engine."""
    return request.get(LeftQueue) is not None


class Queued:
    """What a granted request carries to the engine client: its grant and vLLM's priority header."""

    __slots__ = ("grant", "priority_header")

    def __init__(self, grant: Grant, priority_header: tuple[str, str] | None) -> None:
        self.grant = grant
        self.priority_header = priority_header


# --- acquiring --------------------------------------------------------------------------------
async def acquire(flow: FlowControl | None, request: RequestContext, path: str, body: bytes | None, route: Any, *,
                  band: str | None = None) -> bytes | None:
    """Wait for ``request``'s turn (its band, its tenant's share, a free engine slot); the body to send.

    ``band``: run in this band (never above the key's; the batches' ``batch``), instead of what
    the request asks for. Raises the 400/429/503 as a ``GatewayError``. The body changes only
    when it named a band in ``priority`` (vLLM refuses a string there).
    """
    if flow is None or path not in QUEUED_PATHS:
        return _without_engine_priority(body) if path in QUEUED_PATHS else body
    held = request.get(Queued)
    if held is not None and not held.grant.released:  # already holds one (a continuation opens again)
        return body
    try:
        chosen, body = _band(flow, request, body, band)
    except InvalidBand as problem:
        raise band_error(problem) from None
    principal = request.principal
    team = getattr(principal, "team", None)
    limits = getattr(principal, "limits", None)
    found = _MAX_TOKENS.search(body) if body else None
    demand = Demand(model=getattr(route, "model", None), key_id=request.key_id, band=chosen,
                    team_id=team.id if team is not None else None, weight=getattr(principal, "weight", 1.0) or 1.0,
                    key_limit=getattr(limits, "max_concurrency", None),
                    team_limit=team.limits.max_concurrency if team is not None else None,
                    tokens=estimated_tokens(len(body or b""), int(found.group(1)) if found else None), route=route,
                    capped=request.scope is not None)  # a client's request (a batch line has none)
    slot = request.get(Slot)
    if slot is not None:  # admitted by the middleware's counters on a route not deferred: the flow counts it now
        slot.hand_over()
    trace = trace_of(request)  # (None when tracing is off or the request is not traced: no clock read)
    started = time.perf_counter() if trace is not None else 0.0
    try:
        grant = await flow.acquire(demand)
    except QueueRefused as refusal:
        if trace is not None:
            trace.queued(chosen.name, "refused", time.perf_counter() - started, refusal.reason)
        raise refusal_error(refusal) from None
    except asyncio.CancelledError:  # its client left while it waited
        request.put(LEFT_QUEUE)  # (its limits give back its request: relay.metering)
        if trace is not None:
            trace.queued(chosen.name, "left", time.perf_counter() - started)
        raise
    if trace is not None:
        trace.queued(chosen.name, "dispatched", grant.waited)
    request.put(Queued(grant, engine_priority_header(chosen, flow.scheduling_policy)))
    request.add_response_header(QUEUE_WAIT_HEADER, str(grant.wait_ms))
    return body


def _band(flow: FlowControl, request: RequestContext, body: bytes | None, band: str | None) -> tuple[Band, bytes]:
    bands = flow.bands
    allowed = bands.get(getattr(request.principal, "priority", None) or "") or bands.default
    if band is not None:
        return resolve_band(bands, allowed, bands.named("band", band)), body
    header = None
    scope = request.scope
    if scope is not None:
        for name, value in scope["headers"]:
            if name == _HEADER:
                header = value.decode("latin-1")
                break
    payload = _json_object(body) if body and (b'"priority"' in body or b'"service_tier"' in body) else None
    chosen = resolve_band(bands, allowed, requested_band(bands, header, payload))
    if payload is not None and isinstance(payload.get(BODY_FIELD), str):
        bands.named(BODY_FIELD, payload[BODY_FIELD])  # a bad name is a 400 even when the header decided
        del payload[BODY_FIELD]  # a band name is the gateway's; vLLM's field is an integer
        body = orjson.dumps(payload)
    elif payload is not None and isinstance(payload.get(BODY_FIELD), int):
        del payload[BODY_FIELD]  # vLLM's own: never relayed as sent (below)
        body = orjson.dumps(payload)
    return chosen, body


def _without_engine_priority(body: bytes | None) -> bytes | None:
    """``body`` without vLLM's integer ``priority``: only the gateway sets it (``X-Vllm-Priority``, by band).

    Relayed as sent, it let a client jump the queue of an engine on the priority scheduler whenever
    the gateway sent no header of its own (``FLOW_CONTROL=false``, or ``ENGINE_SCHEDULING_POLICY``
    left at ``fcfs`` in front of such engines).
    """
    payload = _json_object(body) if body and b'"priority"' in body else None
    if payload is None or not isinstance(payload.get(BODY_FIELD), int):
        return body
    del payload[BODY_FIELD]
    return orjson.dumps(payload)


def _json_object(body: bytes) -> dict | None:
    """``body`` parsed, when it is a JSON object (anything else is the protocol's to refuse)."""
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return payload if isinstance(payload, dict) else None


# --- at the engine client ---------------------------------------------------------------------
def granted_engine(request: RequestContext | None, route: Any) -> Any:
    """The engine ``request`` was granted, while it can still take it (None: the router picks)."""
    queued = request.get(Queued) if request is not None else None
    if queued is None:
        return None
    engine = queued.grant.engine
    if engine is None or queued.grant.released or engine.id in getattr(route, "avoid", ()) \
            or not engine.routable(time.monotonic()):
        return None
    return engine


def granted_reason(request: RequestContext | None) -> str | None:
    """Why the router picked ``request``'s granted engine (its routing reason), if it was granted one."""
    queued = request.get(Queued) if request is not None else None
    return queued.grant.demand.routed if queued is not None else None


def engine_headers(request: RequestContext | None, engine: Any, headers: dict[str, str]) -> dict[str, str]:
    """``headers`` for ``request``'s attempt on ``engine``: its grant follows it, its band's priority goes along."""
    queued = request.get(Queued) if request is not None else None
    if queued is None:
        return headers
    queued.grant.moved(engine)
    header = queued.priority_header
    if header is None:
        return headers
    return {**headers, header[0]: header[1]}


# --- releasing --------------------------------------------------------------------------------
def release(request: RequestContext, usage: dict | None = None) -> None:
    """``request``'s engine request ended: its slot goes to the next waiter; ``usage`` corrects its tenant's share."""
    queued = request.get(Queued)
    if queued is not None and not queued.grant.released:
        queued.grant.release(tokens_of_usage(usage))


def tokens_of_usage(usage: dict | None) -> int | None:
    """Prompt plus completion tokens of a usage object (OpenAI's or Anthropic's words); None when unknown."""
    if not isinstance(usage, dict):
        return None
    total = usage.get("total_tokens")
    if isinstance(total, int):
        return total
    counts = [usage.get(name) for name in ("prompt_tokens", "completion_tokens", "input_tokens", "output_tokens")]
    served = sum(count for count in counts if isinstance(count, int))
    return served if any(isinstance(count, int) for count in counts) else None


def tokens_of_answer(answer: bytes) -> int | None:
    """The tokens a non-streamed answer reports in its usage (found without parsing the whole answer)."""
    found = _TOTAL.search(answer)
    if found is not None:
        return int(found.group(1))
    counts = _IN_OUT.findall(answer)
    return sum(int(count) for count in counts[-2:]) if counts else None


def wait_ms(request: RequestContext) -> int:
    """How long ``request`` waited in the queue, whole milliseconds (the access log's ``queue_ms``)."""
    queued = request.get(Queued)
    return queued.grant.wait_ms if queued is not None else 0


# --- whole engine requests --------------------------------------------------------------------
async def open_stream(flow: FlowControl | None, engines: Any, path: str, body: bytes, *, request: RequestContext,
                      route: Any) -> Any:
    """Acquire, then open ``request``'s engine stream (``EngineClient.open_stream``); ``release`` when it ends.

    The caller counts the whole wait as engine time (the stream runner's ``EngineWait``)."""
    body = await acquire(flow, request, path, body, route)
    return await engines.open_stream(path, body, request=request, route=route)


async def request(flow: FlowControl | None, engines: Any, request: RequestContext, method: str, path: str,
                  body: bytes | None, *, route: Any = None, content_type: str | None = None,
                  band: str | None = None) -> tuple[int, bytes]:
    """One non-streamed engine request under flow control: (status, answer), released when it returns.

    ``band``: the band to run in (the batches' executor passes ``"batch"``); else the one the
    request asks for. Raises ``GatewayError`` (400/429/503) when it may not go, the engine
    client's failures otherwise. Cancelling it while queued leaves the queue at once.
    """
    started = time.perf_counter()
    body = await acquire(flow, request, path, body, route, band=band)
    request.engine_wait += time.perf_counter() - started
    tokens = None
    try:
        status, answer = await engines.request_bytes(method, path, body, request=request, route=route,
                                                     content_type=content_type)
        if status < 400:
            tokens = tokens_of_answer(answer)
        return status, answer
    finally:
        queued = request.get(Queued)
        if queued is not None and not queued.grant.released:
            queued.grant.release(tokens)


# --- assembly ---------------------------------------------------------------------------------
def flow_control(settings: Any, engines: Any, engine_state: Any, metrics: Any,
                 admission: Admission | None = None) -> FlowControl | None:
    """The flow control ``create_app`` hands the relay (None with ``FLOW_CONTROL`` off): it reads the
    fleet's engines, picks with the router, and dispatches waiters after every look at the engines.

    ``admission``: the middleware's counters; given, the generating routes' requests are counted by
    the flow instead, and wait at ``MAX_INFLIGHT`` / ``MAX_INFLIGHT_PER_KEY`` (``gateway.flow.caps``)."""
    if not settings.flow_control:
        return None

    def pick(demand: Demand, full: Any) -> Any:
        router = engines.router
        engine = router.pick(demand.route, full)
        if engine is not None:
            demand.routed = router.last_reason  # (read right after the pick: no other in between)
        return engine

    flow = FlowControl.from_settings(settings, engines=lambda: engines.fleet.engines, pick=pick, metrics=metrics,
                                     others=admission)
    engine_state.on_change(flow.capacity_changed)
    if admission is not None:
        # (The scheduler's own: a no-op while nothing waits, since it runs at the end of every request.)
        admission.defer(QUEUED_ROUTES, flow.scheduler.capacity_changed, flow.scheduler.caps)
    return flow
