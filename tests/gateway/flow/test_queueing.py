"""The request path's side of flow control (``gateway.http.queueing``), on fakes: no engine, no server.

Which band a request runs in (its key's, or lower when it asks; a bad name is a 400 naming the
field), the body it sends (a band name taken out of ``priority``), what the engine client adds
(the grant follows a failover; vLLM's priority goes along when the engines run the priority
scheduler), releasing with the tokens served, and leaving the queue when cancelled.
"""

from __future__ import annotations

import asyncio

import orjson
import pytest

from gateway.engines.routing import RouteHints
from gateway.flow.control import FlowControl
from gateway.http import queueing
from gateway.http.auth import Principal
from gateway.http.context import RequestContext
from gateway.http.errors import GatewayError
from gateway.tenancy.model import Limits, TeamLimits
from tests.gateway.flow.fakes import MODEL, FakeEngine, make_scheduler

CHAT = "/v1/chat/completions"
ROUTE = RouteHints(model=MODEL)
DEADLINE = 5.0


class Engine(FakeEngine):
    """A fake engine with the id the engine client's routes name."""

    @property
    def id(self) -> str:
        return self.name


def busy_engine(name: str = "engine-0") -> Engine:
    engine = Engine(name=name)
    engine.scrape(1, 1, own=2)  # seen running one with one waiting: its concurrency is 1
    return engine


def context(priority: str = "standard", *, headers: dict[str, str] | None = None, key: str = "key-a",
            team: str | None = None, weight: float = 1.0, max_concurrency: int | None = None) -> RequestContext:
    principal = Principal(key_id=key, role="read", priority=priority, weight=weight,
                          team=TeamLimits(team, Limits()) if team else None, limits=Limits(max_concurrency=max_concurrency))
    scope = {"type": "http", "path": CHAT, "headers": [(k.encode(), v.encode()) for k, v in (headers or {}).items()]}
    return RequestContext("req-1", scope=scope, principal=principal)


def flow(engines, policy: str = "fcfs", **values) -> FlowControl:
    return FlowControl(make_scheduler(engines, **values), scheduling_policy=policy)


def body(**fields) -> bytes:
    return orjson.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **fields})


def band_of(request: RequestContext) -> str:
    return request.get(queueing.Queued).grant.demand.band.name


async def test_a_request_runs_in_its_keys_band_and_may_ask_for_a_lower_one_never_a_higher_one():
    control = flow([Engine()])
    cases = [("standard", {}, "standard"), ("interactive", {}, "interactive"), ("batch", {}, "batch"),
             ("standard", {"x-priority": "batch"}, "batch"), ("standard", {"x-priority": "interactive"}, "standard"),
             ("batch", {"x-priority": "Interactive"}, "batch"), ("interactive", {"x-priority": "standard"}, "standard")]
    for allowed, headers, expected in cases:
        request = context(allowed, headers=headers)
        await queueing.acquire(control, request, CHAT, body(), ROUTE)
        assert band_of(request) == expected, (allowed, headers)
        queueing.release(request)


async def test_a_band_named_in_the_body_is_taken_out_before_the_engine_sees_it():
    control = flow([Engine()])
    request = context("standard")
    sent = await queueing.acquire(control, request, CHAT, body(priority="batch", max_tokens=7), ROUTE)
    assert band_of(request) == "batch"
    assert orjson.loads(sent) == {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 7}
    # vLLM's own integer priority asks for no band and is taken out too: only the gateway sets the engine's.
    other = context("standard")
    sent = await queueing.acquire(control, other, CHAT, body(priority=-5), ROUTE)
    assert orjson.loads(sent) == {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    assert band_of(other) == "standard"
    flex = context("interactive")
    await queueing.acquire(control, flex, CHAT, body(service_tier="flex"), ROUTE)
    assert band_of(flex) == "batch"


@pytest.mark.parametrize(("headers", "fields", "field"), [({"x-priority": "urgent"}, {}, "x-priority"),
                                                          ({}, {"priority": "urgent"}, "priority"),
                                                          ({"x-priority": "batch"}, {"priority": "vip"}, "priority")])
async def test_an_unknown_band_is_a_400_naming_the_field(headers, fields, field):
    control = flow([Engine()])
    with pytest.raises(GatewayError) as raised:
        await queueing.acquire(control, context(headers=headers), CHAT, body(**fields), ROUTE)
    assert raised.value.status == 400 and raised.value.param == field and raised.value.code == "invalid_priority"
    assert "interactive, standard, batch" in raised.value.message
    assert control.scheduler.queued() == 0


async def test_only_generating_routes_queue_and_without_flow_control_nothing_does():
    control = flow([busy_engine()])
    request = context()
    assert await queueing.acquire(control, request, "/tokenize", b"{}", ROUTE) == b"{}"
    assert await queueing.acquire(None, request, CHAT, b"{}", ROUTE) == b"{}"
    assert request.get(queueing.Queued) is None


async def test_the_engine_client_starts_on_the_grant_and_a_failover_moves_the_grant():
    first, second = Engine(name="a"), Engine(name="b")
    control = flow([first, second], policy="priority")
    request = context("interactive")
    await queueing.acquire(control, request, CHAT, body(), ROUTE)
    grant = request.get(queueing.Queued).grant
    assert queueing.granted_engine(request, ROUTE) is grant.engine is first
    assert queueing.granted_engine(request, RouteHints(model=MODEL, avoid=("a",))) is None  # it just failed there
    headers = queueing.engine_headers(request, first, {"x-request-id": "req-1"})
    assert headers == {"x-request-id": "req-1", "x-vllm-priority": "-1"}
    queueing.engine_headers(request, second, {})
    held = {engine.name: slots.held for engine, slots in control.scheduler._slots.items()}
    assert grant.engine is second and held == {"a": 0, "b": 1}
    queueing.release(request, {"prompt_tokens": 5, "completion_tokens": 3})
    assert grant.released and control.scheduler._slots[second].held == 0


async def test_engines_on_fcfs_get_no_priority_and_requests_without_a_grant_no_change():
    control = flow([Engine()], policy="fcfs")
    request = context("interactive")
    await queueing.acquire(control, request, CHAT, body(), ROUTE)
    assert queueing.engine_headers(request, Engine(), {"a": "b"}) == {"a": "b"}
    assert queueing.engine_headers(context(), Engine(), {"a": "b"}) == {"a": "b"}


class FakeEngines:
    """The engine client's ``request_bytes``: answers when told, or fails."""

    def __init__(self, answer: bytes = b"", error: Exception | None = None) -> None:
        self.answer, self.error, self.calls = answer, error, 0

    async def request_bytes(self, method, path, body, *, request, route, content_type):
        self.calls += 1
        if self.error is not None:
            raise self.error
        return 200, self.answer


async def test_a_non_streamed_request_is_released_with_the_tokens_it_was_served_whatever_happens():
    engine = Engine()
    control = flow([engine])
    holder = context()  # the same tenant keeps one request in flight, so its counter stays to be read
    await queueing.acquire(control, holder, CHAT, body(), ROUTE)
    answer = b'{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":32,"total_tokens":42}}'
    request = context()
    status, _ = await queueing.request(control, FakeEngines(answer), request, "POST", CHAT, body(max_tokens=500),
                                       route=ROUTE)
    grant = request.get(queueing.Queued).grant
    assert grant.demand.tokens > 500  # charged its estimate at dispatch...
    fairness = control.scheduler._queues[MODEL].bands[grant.demand.band.rank].fairness
    held = holder.get(queueing.Queued).grant.demand.tokens
    assert status == 200 and grant.released
    assert fairness.counter("key:key-a") == held + 42  # ...corrected to what it was served
    failing = context()
    with pytest.raises(ConnectionError):
        await queueing.request(control, FakeEngines(error=ConnectionError("gone")), failing, "POST", CHAT, body(),
                               route=ROUTE)
    assert failing.get(queueing.Queued).grant.released
    assert control.scheduler._slots[engine].held == 1  # the holder's alone


async def test_the_batches_band_is_its_own_and_never_above_the_keys():
    control = flow([Engine()])
    low = context("standard")
    await queueing.request(control, FakeEngines(b"{}"), low, "POST", CHAT, body(), route=ROUTE, band="batch")
    assert band_of(low) == "batch"
    capped = context("batch")
    await queueing.request(control, FakeEngines(b"{}"), capped, "POST", CHAT, body(), route=ROUTE, band="interactive")
    assert band_of(capped) == "batch"


async def test_a_request_cancelled_while_queued_leaves_the_queue_and_frees_nothing():
    engine = busy_engine()
    control = flow([engine])
    holder = context(key="key-h")
    await queueing.acquire(control, holder, CHAT, body(), ROUTE)  # takes the one slot
    engines = FakeEngines(b"{}")
    waiting = asyncio.create_task(queueing.request(control, engines, context(), "POST", CHAT, body(), route=ROUTE))
    async with asyncio.timeout(DEADLINE):
        while control.scheduler.queued() != 1:
            await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert control.scheduler.queued() == 0 and engines.calls == 0
    assert control.scheduler._slots[engine].held == 1  # the holder's, untouched


async def test_refusals_are_429_for_the_keys_own_limit_and_503_for_a_full_fleet_with_retry_after():
    control = flow([busy_engine()], max_queued=0, max_queued_per_key=5)
    await queueing.acquire(control, context(key="key-h"), CHAT, body(), ROUTE)  # takes the one slot
    with pytest.raises(GatewayError) as full:
        await queueing.acquire(control, context(), CHAT, body(), ROUTE)
    assert full.value.status == 503 and full.value.code == "queue_full" and int(full.value.headers["retry-after"]) >= 1
    own = flow([Engine()], max_queued_per_key=0)
    await queueing.acquire(own, context(max_concurrency=1), CHAT, body(), ROUTE)
    with pytest.raises(GatewayError) as limited:
        await queueing.acquire(own, context(max_concurrency=1), CHAT, body(), ROUTE)
    assert limited.value.status == 429 and limited.value.code == "key_queue_full"
    assert limited.value.headers == {"retry-after": "1"}


async def test_a_key_at_its_concurrency_limit_waits_for_its_own_request_to_end():
    control = flow([Engine()])
    first = context(max_concurrency=1)
    await queueing.acquire(control, first, CHAT, body(), ROUTE)
    second = context(max_concurrency=1)
    waiting = asyncio.create_task(queueing.acquire(control, second, CHAT, body(), ROUTE))
    other = context(key="key-b", max_concurrency=1)
    await queueing.acquire(control, other, CHAT, body(), ROUTE)  # another key is not held up
    async with asyncio.timeout(DEADLINE):
        while control.scheduler.queued() != 1:
            await asyncio.sleep(0)
    queueing.release(first)
    await asyncio.wait_for(waiting, DEADLINE)
    assert second.get(queueing.Queued).grant.waited >= 0 and dict(second.response_headers)[b"x-queue-wait-ms"]


def test_tokens_are_read_from_either_protocols_usage():
    assert queueing.tokens_of_usage({"prompt_tokens": 3, "completion_tokens": 4}) == 7
    assert queueing.tokens_of_usage({"input_tokens": 3, "output_tokens": 5}) == 8
    assert queueing.tokens_of_usage({"total_tokens": 9, "prompt_tokens": 1}) == 9
    assert queueing.tokens_of_usage(None) is None and queueing.tokens_of_usage({}) is None
    anthropic = b'{"content":[{"text":"say \\"input_tokens\\": 99"}],"usage":{"input_tokens":12,' \
                b'"cache_read_input_tokens":0,"output_tokens":30}}'
    assert queueing.tokens_of_answer(anthropic) == 42
    assert queueing.tokens_of_answer(b'{"usage":{"prompt_tokens":1,"total_tokens":11}}') == 11
    assert queueing.tokens_of_answer(b'{"data":[]}') is None
