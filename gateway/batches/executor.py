"""How one batch line runs: the ``LineExecutor`` interface, and the request path's executor.

The lifecycle (``worker``) asks an executor for each line's answer and records it; the
executor knows nothing of leases or files. ``RequestPathExecutor`` runs a line as the gateway
runs a live non-streamed request, detached (no client: its own ``RequestContext`` for the
batch owner's key, id ``<batch id>-<line>``):

1. the output limit fitted to the model's context (``protocols.common.budget``, chat and
   completions), the model alias resolved (``EngineState.resolve_model``), the routing hints
   (model, prefix) as the live routes build them;
2. leave from flow control in the ``batch`` band (``lane``): held while the engines are busy,
   so batch lines take idle capacity and interactive traffic keeps its latency; a ``priority``
   the line wrote is never relayed (the band's is sent when the engines run the priority
   scheduler);
3. the engine call through the core's engine client (routing, failover before the first byte);
4. the usage counted for the owner's key: the Prometheus token counters and the usage ledger
   (``usage``), and the grant released with the tokens served.

An engine that cannot be used (unreachable, no engine ready, a timeout) raises a ``Failure``:
the worker retries the line (``BATCH_LINE_MAX_ATTEMPTS``) before recording it. Any answer the
engine gives, errors included, is the line's result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import orjson

from gateway.batches.lane import BatchLane
from gateway.batches.model import MESSAGES_ENDPOINT, LineResult, LineRun
from gateway.batches.usage import UsageRecorder, batch_route, usage_of
from gateway.core import Core
from gateway.engines.routing import RouteHints, openai_hints
from gateway.failures import Failure
from gateway.http.context import RequestContext
from gateway.http.errors import GatewayError, error_envelope, http_error
from gateway.protocols.common import budget

BUDGETS = {"/v1/chat/completions": budget.CHAT, "/v1/completions": budget.COMPLETIONS}
LIMIT_FIELDS = ("max_completion_tokens", "max_tokens", "max_output_tokens")
PRIORITY_FIELD = "priority"  # vLLM's body field: the line's own is never relayed


class LineExecutor(Protocol):
    async def run_line(self, line: LineRun, owner: str) -> LineResult: ...


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


class RequestPathExecutor:
    def __init__(self, core: Core, lane: BatchLane, *, record_usage: UsageRecorder | None = None) -> None:
        self.core = core
        self.lane = lane
        self.record_usage = record_usage

    async def run_line(self, line: LineRun, owner: str) -> LineResult:
        core = self.core
        payload = orjson.loads(line.body)
        asked = payload.get("model")
        request = RequestContext(f"{line.batch_id}-{line.line}", principal=LineCaller(owner))
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
        if self.lane.engine_priority is not None and line.endpoint != MESSAGES_ENDPOINT:
            payload[PRIORITY_FIELD] = self.lane.engine_priority
        if line.endpoint == MESSAGES_ENDPOINT:
            hints = RouteHints(model=model)
        else:
            hints = openai_hints(payload, model=model, with_prefix=core.engines.router.uses_prefix)
        body = orjson.dumps(payload)
        grant = await self.lane.enter(model=model, owner=owner, body_bytes=len(body),
                                      max_tokens=output_limit(payload), route=hints)
        served: int | None = None
        try:
            status, raw = await core.engines.request_bytes("POST", line.endpoint, body, request=request, route=hints)
            try:
                answer = orjson.loads(raw)
            except orjson.JSONDecodeError:
                answer = {"error": {"message": raw[:500].decode("utf-8", "replace"), "type": "upstream_error"}}
            if status in (502, 503, 504):
                raise GatewayError(status, "the inference engine could not answer the line", code="engine_unavailable")
            if 200 <= status < 300:
                used = usage_of(answer)
                served = used.total or None
                self._count(owner, asked if isinstance(asked, str) else model, line.endpoint, used)
        finally:
            grant.release(served)
        return LineResult(status, answer)

    def _count(self, owner: str, model: str, endpoint: str, used) -> None:
        if not used.total:
            return
        self.core.metrics.count_usage(owner, {"prompt_tokens": used.prompt, "completion_tokens": used.completion})
        if self.record_usage is not None:
            self.record_usage(key_id=owner, model=model, route=batch_route(endpoint), prompt_tokens=used.prompt,
                              completion_tokens=used.completion, cached_tokens=used.cached,
                              reasoning_tokens=used.reasoning)
