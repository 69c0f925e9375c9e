"""Concurrency has one home with flow control on: a request over a limit waits in the queue instead of a 429.

The limits: a key's and its team's ``max_concurrency`` (no longer the limiter's to refuse for a
request that queues), ``MAX_INFLIGHT_PER_KEY`` and ``MAX_INFLIGHT`` (no longer the middleware's
to refuse: ``gateway.flow.caps`` counts the requests flow control let go plus the ones the
middleware still counts). On fakes and a fake clock first (the scheduler, the admission counters,
the limiter's demand), then through the whole app in front of the fake engine. With
``FLOW_CONTROL=false`` the refusals stay as they were (tests/gateway/http/test_security.py,
tests/gateway/tenancy/test_request_path.py pin it off).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from gateway.flow.caps import InflightCaps
from gateway.flow.demand import Grant
from gateway.flow.errors import QueueRefused
from gateway.http.admission import Admission, Slot
from gateway.tenancy.limits.demand import demand_for
from gateway.tenancy.model import Limits, TeamLimits
from tests.gateway.flow.fakes import BATCH, INTERACTIVE, Clock, FakeEngine, demand, make_scheduler
from tests.support.bodies import chat_body
from tests.support.gateway import READ_KEY, WRITE_KEY, bearer, serving
from tests.support.queueing import hold_one, let_go, new_key, queued
from tests.support.waiting import until

CHAT = "/v1/chat/completions"
DEADLINE = 20.0


@dataclass
class Others:
    """The requests in flight the middleware still counts (``caps.OtherRequests``)."""

    inflight: int = 0
    per_key: dict[str, int] = field(default_factory=dict)

    def held(self, key_id: str) -> int:
        return self.per_key.get(key_id, 0)


def capped(key: str = "k1", band=None, **values):
    return demand(key, band or INTERACTIVE, capped=True, **values)


def granted(offered) -> bool:
    """Let go at once (a grant, or a place in the queue the same call dispatched)."""
    return isinstance(offered, Grant) or isinstance(offered.outcome, Grant)


# --- the scheduler, on a fake clock ---------------------------------------------------------------
def test_a_request_over_max_inflight_waits_and_goes_when_a_request_ends():
    scheduler = make_scheduler([FakeEngine()], caps=InflightCaps(max_inflight=2, max_per_key=10, others=Others()))
    first, second = scheduler.offer(capped("a")), scheduler.offer(capped("b"))
    assert isinstance(first, Grant) and isinstance(second, Grant)
    waiting = scheduler.offer(capped("c"))
    assert not isinstance(waiting, Grant) and waiting.outcome is None and scheduler.queued() == 1
    first.release(10)
    assert isinstance(waiting.outcome, Grant) and scheduler.queued() == 0


def test_requests_the_middleware_counts_share_the_gateways_cap_and_their_end_lets_a_waiter_go():
    others = Others(inflight=1, per_key={"a": 1})
    scheduler = make_scheduler([FakeEngine()], caps=InflightCaps(max_inflight=1, max_per_key=10, others=others))
    waiting = scheduler.offer(capped("b"))
    assert waiting.outcome is None  # an embedding (say) holds the gateway's one slot
    others.inflight, others.per_key = 0, {}
    scheduler.capacity_changed()  # what Admission.on_leave calls
    assert isinstance(waiting.outcome, Grant)


def test_a_key_at_max_inflight_per_key_waits_while_another_key_goes():
    others = Others(inflight=1, per_key={"a": 1})  # key a has one request the middleware counts
    scheduler = make_scheduler([FakeEngine()], caps=InflightCaps(max_inflight=100, max_per_key=2, others=others))
    held = scheduler.offer(capped("a"))
    assert isinstance(held, Grant)
    waiting = scheduler.offer(capped("a"))
    assert waiting.outcome is None
    assert granted(scheduler.offer(capped("b")))  # another key is not held up (a line of its own)
    held.release(5)
    assert isinstance(waiting.outcome, Grant)


def test_waiting_too_long_at_a_cap_is_429_for_the_keys_own_and_503_for_the_gateways():
    clock = Clock()
    others = Others()
    scheduler = make_scheduler([FakeEngine()], clock, queue_timeout=30.0,
                               caps=InflightCaps(max_inflight=2, max_per_key=1, others=others))
    scheduler.offer(capped("a"))
    own = scheduler.offer(capped("a"))
    scheduler.offer(capped("b"))  # the gateway's second slot: now it is full too
    full = scheduler.offer(capped("c"))
    clock.advance(30.0)
    assert scheduler.expire() == 2
    assert isinstance(own.outcome, QueueRefused) and own.outcome.own_limit and own.outcome.retry_after == 1
    assert isinstance(full.outcome, QueueRefused) and not full.outcome.own_limit
    assert "limit of 2 requests in flight" in full.outcome.message and full.outcome.retry_after >= 1


def test_work_without_a_client_is_not_held_by_the_caps_nor_counted():
    caps = InflightCaps(max_inflight=1, max_per_key=1, others=Others(inflight=1, per_key={"k1": 1}))
    scheduler = make_scheduler([FakeEngine()], caps=caps)
    line = scheduler.offer(demand("k1", BATCH))  # a batch line (capped=False)
    assert isinstance(line, Grant) and caps.held == 0
    line.release(1)


def test_a_keys_max_concurrency_and_the_caps_are_one_wait():
    scheduler = make_scheduler([FakeEngine()], caps=InflightCaps(max_inflight=10, max_per_key=10, others=Others()))
    held = scheduler.offer(capped("a", key_limit=1))
    waiting = scheduler.offer(capped("a", key_limit=1))
    assert waiting.outcome is None
    held.release(3)
    assert isinstance(waiting.outcome, Grant) and scheduler.caps.held == 1


# --- the middleware's counters ----------------------------------------------------------------------
def test_admission_leaves_deferred_routes_to_flow_control_and_tells_it_when_a_request_ends():
    admission = Admission(max_inflight=4, max_inflight_per_key=2)
    ended: list[int] = []
    admission.defer({CHAT}, lambda: ended.append(admission.inflight))
    assert not admission.counts("POST", CHAT)
    assert admission.counts("GET", CHAT) and admission.counts("POST", "/v1/embeddings")
    assert admission.try_enter("a") is None and admission.held("a") == 1
    slot = Slot(admission, "a")
    slot.hand_over()  # the request queued after all: flow control counts it now
    slot.leave()      # (the middleware's own leave at the end does nothing more)
    assert admission.inflight == 0 and admission.held("a") == 0 and ended == [0]


def test_a_request_that_never_queues_is_refused_at_a_cap_the_grants_fill():
    caps = InflightCaps(max_inflight=3, max_per_key=2)
    admission = Admission(max_inflight=3, max_inflight_per_key=2)
    admission.defer({CHAT}, lambda: None, caps)
    caps.enter("a")
    caps.enter("a")  # key a's two generations, let go by flow control
    assert admission.try_enter("a") == "this API key is at its limit of 2 requests in flight"
    assert admission.try_enter("b") is None  # another key: one slot of the gateway's three is left
    assert admission.try_enter("c") == "the gateway is at its limit of 3 requests in flight"
    caps.leave("a")
    assert admission.try_enter("a") is None


# --- the limiter ----------------------------------------------------------------------------------
def test_the_limiters_demand_leaves_max_concurrency_out_when_flow_control_holds_it():
    limits = Limits(rpm=10, max_concurrency=2)
    team = TeamLimits("t1", Limits(max_concurrency=3))
    kept = demand_for(key_id="k", limits=limits, team=team, prompt_tokens=5, max_tokens=5)
    assert [scope.limits.max_concurrency for scope in kept.scopes] == [3, 2]
    left = demand_for(key_id="k", limits=limits, team=team, prompt_tokens=5, max_tokens=5, concurrency=False)
    assert [(scope.name, scope.limits.max_concurrency, scope.limits.rpm) for scope in left.scopes] == \
        [("key:k", None, 10)]  # the team had nothing else: no scope of its own


async def test_the_meter_leaves_max_concurrency_to_the_flow_only_for_calls_that_queue():
    from gateway.failures import LimitReached
    from gateway.http.auth import Principal
    from gateway.http.context import RequestContext
    from gateway.relay.metering import Meter
    from gateway.tenancy.limits.limiter import Limiter
    from gateway.tenancy.limits.local import LocalLimits

    meter = Meter(Limiter(local=LocalLimits()), ledger=None)
    meter.queued_paths = frozenset({CHAT})
    principal = Principal(key_id="k", role="read", limits=Limits(max_concurrency=1))
    body = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}'

    def request() -> RequestContext:
        return RequestContext("req", principal=principal)

    relayed = [await meter.admit(request(), CHAT, body, queues=True) for _ in range(3)]  # the flow holds them
    assert all(metered is not None for metered in relayed)
    held = await meter.admit(request(), CHAT, body)  # the code API's call never queues: the limiter counts it
    with pytest.raises(LimitReached):
        await meter.admit(request(), CHAT, body)
    with pytest.raises(LimitReached):  # nor does an embedding: the limiter's count, shared with the code API's
        await meter.admit(request(), "/v1/embeddings", b'{"model": "m", "input": "hi"}', queues=True)
    await held.settle(answered=False)
    assert await meter.admit(request(), CHAT, body) is not None


# --- through the app, in front of the fake engine -------------------------------------------------
@pytest.mark.parametrize("cap", [{"max_inflight_per_key": 1}, {"max_inflight": 1}])
async def test_a_request_over_an_in_flight_cap_waits_for_a_slot_instead_of_a_429(make_settings, fake_engine, cap):
    async with serving(make_settings(api_keys=[READ_KEY], admin_api_keys=[WRITE_KEY], **cap)) as client:
        held = await hold_one(client, fake_engine, READ_KEY)
        waiting = asyncio.create_task(client.post(CHAT, json=chat_body(), headers=bearer(READ_KEY)))
        await queued(client, 1)
        assert not waiting.done()
        await let_go(held)  # a slot frees: the waiting request is dispatched
        answer = await asyncio.wait_for(waiting, DEADLINE)
        listed = await client.get("/v1/models", headers=bearer(READ_KEY))  # never queues, still admitted
    assert answer.status_code == 200 and "x-queue-wait-ms" in answer.headers
    assert [received.path for received in fake_engine.received] == [CHAT, CHAT]
    assert listed.status_code == 200
    assert client.app.state.gateway.admission.inflight == 0


async def test_a_keys_max_concurrency_makes_its_request_wait_not_the_limiters_429(make_settings, fake_engine):
    async with serving(make_settings(api_keys=[READ_KEY], admin_api_keys=[WRITE_KEY])) as client:
        key = await new_key(client, limits={"max_concurrency": 1, "rpm": 100})
        held = await hold_one(client, fake_engine, key)
        waiting = asyncio.create_task(client.post(CHAT, json=chat_body(stream=True), headers=bearer(key)))
        await queued(client, 1)
        other = await client.post(CHAT, json=chat_body(), headers=bearer(READ_KEY))  # another key goes
        await let_go(held)
        answer = await asyncio.wait_for(waiting, DEADLINE)
    assert other.status_code == 200
    assert answer.status_code == 200 and b"data: [DONE]" in answer.content
    assert answer.headers["x-ratelimit-limit-requests"] == "100"  # still limited by the limiter: its rpm


async def test_a_client_leaving_while_queued_at_a_cap_leaves_the_queue(make_settings, fake_engine):
    async with serving(make_settings(api_keys=[READ_KEY], max_inflight_per_key=1)) as client:
        held = await hold_one(client, fake_engine, READ_KEY)
        waiting = asyncio.create_task(client.post(CHAT, json=chat_body(), headers=bearer(READ_KEY)))
        await queued(client, 1)
        await let_go(waiting)
        await queued(client, 0)
        await let_go(held)
        after = await client.post(CHAT, json=chat_body(), headers=bearer(READ_KEY))
    assert after.status_code == 200
    assert len(fake_engine.received) == 2  # the one that left never reached the engine


async def test_a_full_queue_at_a_cap_is_refused_with_retry_after(make_settings, fake_engine):
    async with serving(make_settings(api_keys=[READ_KEY], admin_api_keys=[WRITE_KEY], max_inflight=1,
                                     flow_queue_max_per_key=1)) as client:
        held = await hold_one(client, fake_engine, READ_KEY)
        waiting = asyncio.create_task(client.post(CHAT, json=chat_body(), headers=bearer(READ_KEY)))
        await queued(client, 1)
        refused = await client.post(CHAT, json=chat_body(), headers=bearer(READ_KEY))
        await let_go(held)
        assert (await asyncio.wait_for(waiting, DEADLINE)).status_code == 200
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "key_queue_full"
    assert refused.headers["retry-after"] == "1"
