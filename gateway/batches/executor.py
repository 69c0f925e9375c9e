"""How one batch line runs: the ``LineExecutor`` interface, and the request path's executor.

The lifecycle (``worker``) asks an executor for each line's answer and records it; the
executor knows nothing of leases or files. ``RequestPathExecutor`` runs a line as the gateway
runs a live non-streamed request, detached (no client: its own ``RequestContext`` for the
batch owner's key, its principal as it is now (``callers``), id ``<batch id>-<line>``):

1. the output limit fitted to the model's context (``protocols.common.budget``, chat and
   completions), the model alias resolved (``EngineState.resolve_model``), the routing hints
   (model, prefix) as the live routes build them;
2. admitted as a live request of the owner's key (``relay.metering``: its models list, rpm,
   tpm, concurrency, budgets, its team's): a rate limit is waited out (``Retry-After``, then
   again), a spent budget is the line's result (429, ``error.code`` ``insufficient_quota``);
   a key revoked or expired raises ``callers.OwnerKeyRefused`` (the worker stops the batch);
   the batch's ``stop`` (a cancel, the window's end) ends that wait at once with ``LineStopped``:
   a line never reaches the engine once its batch stopped before it was admitted;
3. leave from flow control in the ``batch`` band (``lane``): held while the engines are busy,
   so batch lines take idle capacity and interactive traffic keeps its latency (and held to
   ``FLOW_YIELD_FLOOR`` lines per engine while interactive requests run there); the batch's
   ``stop`` takes a line waiting for its grant out of the queue at once (``LineStopped``); a ``priority``
   the line wrote is never relayed (the band's goes as ``X-Vllm-Priority`` when the engines run
   the priority scheduler, as for live requests);
4. the engine call through the core's engine client (routing, failover before the first byte);
5. settled as a live request is (``relay.metering``): the engine's usage replaces the
   reservation and goes to the usage ledger on the route ``batch:<endpoint>``; the Prometheus
   token counters; the grant released with the tokens served.

An engine that cannot be used (unreachable, no engine ready, a timeout) raises a ``Failure``:
the worker retries the line (``BATCH_LINE_MAX_ATTEMPTS``) before recording it. Any answer the
engine gives, errors included, is the line's result.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import orjson

from gateway.batches.callers import LineCallers, OwnerKeyRefused
from gateway.batches.lane import BatchLane
from gateway.batches.model import MESSAGES_ENDPOINT, LineResult, LineRun, LineStopped
from gateway.batches.usage import batch_route, usage_of
from gateway.core import Core
from gateway.engines.routing import RouteHints, openai_hints
from gateway.failures import Failure, LimitReached
from gateway.http.context import RequestContext
from gateway.http.errors import OPENAI_SHAPE, ErrorShape, GatewayError, error_envelope, http_error
from gateway.http.queueing import Queued
from gateway.protocols.anthropic.errors import ANTHROPIC_SHAPE
from gateway.protocols.common import budget
from gateway.relay.metering import admit_call, settle_call

BUDGETS = {"/v1/chat/completions": budget.CHAT, "/v1/completions": budget.COMPLETIONS}
LIMIT_FIELDS = ("max_completion_tokens", "max_tokens", "max_output_tokens")
PRIORITY_FIELD = "priority"  # vLLM's body field: the line's own is never relayed
# vLLM's pooling routes read the priority from the body only (its generating routes take the
# X-Vllm-Priority header first, which every line carries).
BODY_PRIORITY_ENDPOINTS = frozenset({"/v1/embeddings"})
BUDGET_SPENT = "insufficient_quota"  # the request path's code for a refusal by a spent budget
RATE_WAIT_MAX_SECONDS = 60.0  # a rate-limited line asks again after Retry-After, at most this much later


class LineExecutor(Protocol):
    async def run_line(self, line: LineRun, owner: str, stop: asyncio.Event | None = None) -> LineResult: ...


@dataclass(frozen=True, slots=True)
class LineCaller:
    """Who a detached line runs as: the key that created its batch."""

    key_id: str


def error_body(endpoint: str, error: GatewayError) -> dict:
    """A gateway error in the endpoint's own envelope (Anthropic's for Messages, else OpenAI's)."""
    if endpoint == MESSAGES_ENDPOINT:
        kind = "not_found_error" if error.status == 404 else error.type
        return {"type": "error", "error": {"type": kind, "message": error.message}}
    return error_envelope(error.message, error.type, param=error.param, code=error.code)


def output_limit(payload: dict) -> object:
    return next((payload[name] for name in LIMIT_FIELDS if payload.get(name) is not None), None)


@dataclass(frozen=True, slots=True)
class LineRoute:
    """What a detached line has in place of the route that serves a live request: the ledger's
    ``route`` (``batch:<endpoint>``) and how its errors are written."""

    path: str
    error_shape: ErrorShape


class RequestPathExecutor:
    def __init__(self, core: Core, lane: BatchLane, *, callers: LineCallers | None = None,
                 pause: Callable[[float], Awaitable[object]] = asyncio.sleep) -> None:
        self.core = core
        self.lane = lane
        self.callers = callers or LineCallers(None)
        self._pause = pause
        self.rate_waits = 0  # rate-limit refusals waited out (for the tests)

    async def run_line(self, line: LineRun, owner: str, stop: asyncio.Event | None = None) -> LineResult:
        core = self.core
        payload = orjson.loads(line.body)
        asked = payload.get("model")
        request = RequestContext(f"{line.batch_id}-{line.line}", principal=await self.callers.principal(owner))
        request.route = LineRoute(batch_route(line.endpoint),
                                  ANTHROPIC_SHAPE if line.endpoint == MESSAGES_ENDPOINT else OPENAI_SHAPE)
        rule = BUDGETS.get(line.endpoint)
        try:
            if rule is not None:
                await budget.fit_payload(rule, payload, body_bytes=len(line.body), request=request, core=core)
            upstream = core.engine_state.resolve_model(asked)
        except Failure as failure:  # an unknown model (NotFound), a prompt past the context; no engine yet: retried
            error = http_error(failure)
            if error.status >= 500:
                raise
            return LineResult(error.status, error_body(line.endpoint, error))
        model = upstream if upstream is not None else asked
        payload["model"] = model
        payload.pop(PRIORITY_FIELD, None)
        if self.lane.engine_priority is not None and line.endpoint in BODY_PRIORITY_ENDPOINTS:
            payload[PRIORITY_FIELD] = self.lane.engine_priority
        if line.endpoint == MESSAGES_ENDPOINT:
            hints = RouteHints(model=model)
        else:
            hints = openai_hints(payload, model=model, with_prefix=core.engines.router.uses_prefix)
        body = orjson.dumps(payload)
        try:
            body = await self._admitted(request, owner, line.endpoint, body, stop)
        except OwnerKeyRefused:
            raise  # not this line's result alone: the worker stops the batch
        except Failure as failure:  # a spent budget, a model the key may not use: the line's result
            error = http_error(failure)
            if error.status >= 500:
                raise
            problem = {"code": error.code, "message": error.message} if isinstance(failure, LimitReached) else None
            return LineResult(error.status, error_body(line.endpoint, error), error=problem)
        served: int | None = None
        answered = False
        try:
            grant = await self.lane.enter(model=model, owner=owner, body_bytes=len(body),
                                          max_tokens=output_limit(payload), route=hints, stop=stop)
            # As a live request carries it: the grant follows a failover, and the engines running
            # vLLM's priority scheduler get the band's X-Vllm-Priority (every generating route).
            request.put(Queued(grant, self.lane.priority_header))
            try:
                status, raw = await core.engines.request_bytes("POST", line.endpoint, body, request=request,
                                                               route=hints)
                try:
                    answer = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    answer = {"error": {"message": raw[:500].decode("utf-8", "replace"), "type": "upstream_error"}}
                if status in (502, 503, 504):
                    raise GatewayError(status, "the inference engine could not answer the line",
                                       code="engine_unavailable")
                if 200 <= status < 300:
                    used = usage_of(answer)
                    served = used.total or None
                    answered = True
                    await settle_call(request, answer.get("usage") if isinstance(answer, dict) else None,
                                      model=asked if isinstance(asked, str) else model)
                    self._count(owner, used)
            finally:
                grant.release(served)
        finally:
            if not answered:  # refused by the engine, or never answered: the reservation is given back
                await settle_call(request, answered=False)
        return LineResult(status, answer)

    async def _admitted(self, request: RequestContext, owner: str, endpoint: str, body: bytes,
                        stop: asyncio.Event | None) -> bytes:
        """The key's limits, as for a live request of its key (``relay.metering``): the body to send.

        A rate limit (rpm, tpm, concurrency) is waited out, ``Retry-After`` then again with the
        key's limits as they are then, for as long as it takes (the batch has its completion
        window); a spent budget, a prompt past the key's tpm (no wait lets it through) or a model
        the key may not use raises (the line's result); a ``stop`` set before admission raises
        ``LineStopped`` (and ends a wait at once)."""
        while True:
            if stop is not None and stop.is_set():
                raise LineStopped
            request.principal = await self.callers.principal(owner)
            try:
                return await admit_call(request, self.core.relay.meter, endpoint, body, stream=False)
            except LimitReached as refusal:
                if refusal.code == BUDGET_SPENT or refusal.retry_after is None:
                    raise  # no wait lets it through (a prompt past the key's tpm has no Retry-After)
                self.rate_waits += 1
                await self._wait(min(max(refusal.retry_after or 1.0, 1.0), RATE_WAIT_MAX_SECONDS), stop)

    async def _wait(self, seconds: float, stop: asyncio.Event | None) -> None:
        """The pause of a rate-limit refusal, cut short when the batch stops."""
        if stop is None:
            await self._pause(seconds)
            return
        waits = [asyncio.ensure_future(self._pause(seconds)), asyncio.ensure_future(stop.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
            await asyncio.gather(*waits, return_exceptions=True)

    def _count(self, owner: str, used) -> None:
        if used.total:
            self.core.metrics.count_usage(owner, {"prompt_tokens": used.prompt,
                                                  "completion_tokens": used.completion})
