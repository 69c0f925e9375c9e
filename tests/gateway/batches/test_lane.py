"""Batch lines through flow control (``batches.lane``): the batch band, behind interactive traffic, never refused.

Driven by hand with the flow tests' fake engines: explicit events, no sleeps.
"""

from __future__ import annotations

import asyncio

import pytest

from gateway.batches.lane import BatchLane
from gateway.batches.model import LineStopped
from gateway.config import Settings
from gateway.flow.control import FlowControl
from gateway.flow.demand import Demand
from gateway.flow.errors import QueueRefused
from tests.gateway.flow.fakes import MODEL, Picks, saturated_engine


def flow_of(engine, **settings) -> FlowControl:
    values = {"flow_engine_max_waiting": 0} | settings
    return FlowControl.from_settings(Settings(**values), engines=lambda: [engine], pick=Picks([engine]))


def interactive(flow: FlowControl, key: str = "app") -> Demand:
    return Demand(model=MODEL, key_id=key, band=flow.bands.get("interactive"), tokens=100)


async def until(condition, rounds: int = 100) -> None:
    """Let the loop run until ``condition()`` holds (a bounded number of turns, never a wall-clock wait)."""
    for _ in range(rounds):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never held")


async def test_a_line_asks_in_the_batch_band_for_its_owner():
    engine = saturated_engine(1)
    engine.inflight = 0
    lane = BatchLane(flow_of(engine), Settings())
    grant = await lane.enter(model=MODEL, owner="key-1", body_bytes=400, max_tokens=64, route=None)
    assert (grant.demand.band.name, grant.demand.key_id, grant.demand.tokens) == ("batch", "key-1", 100 + 64)
    assert grant.engine is engine
    grant.release(50)


async def test_a_line_waits_while_the_engine_is_full_and_goes_behind_interactive_requests():
    engine = saturated_engine(1)
    engine.inflight = 0
    flow = flow_of(engine)
    lane = BatchLane(flow, Settings())
    busy = await flow.acquire(interactive(flow))  # the engine's one slot
    line = asyncio.create_task(lane.enter(model=MODEL, owner="key-1", body_bytes=40, max_tokens=8, route=None))
    await until(lambda: flow.scheduler.queued() == 1)
    chat = asyncio.create_task(flow.acquire(interactive(flow, "other-app")))  # arrives after the line
    await until(lambda: flow.scheduler.queued() == 2)
    busy.release(100)
    granted = await chat
    assert granted.demand.band.name == "interactive" and not line.done()  # the later interactive request went first
    granted.release(100)
    grant = await line
    assert grant.demand.band.name == "batch"
    grant.release(10)


async def test_a_queue_refusal_is_waited_out_never_the_lines_result():
    refusals = [QueueRefused("timeout", "waited too long", own_limit=False, retry_after=3)]
    engine = saturated_engine(1)
    real = flow_of(engine)
    paused: list[float] = []

    class RefusingOnce:
        bands = real.bands

        async def acquire(self, demand):
            if refusals:
                raise refusals.pop()
            return await real.acquire(demand)

    async def pause(seconds: float) -> None:
        paused.append(seconds)

    lane = BatchLane(RefusingOnce(), Settings(), pause=pause)
    grant = await lane.enter(model=MODEL, owner="key-1", body_bytes=40, max_tokens=8, route=None)
    assert paused == [3.0] and lane.refusals == 1 and grant.demand.band.name == "batch"
    grant.release(None)


@pytest.mark.parametrize(("policy", "priority"), [("fcfs", None), ("priority", 1)])
def test_the_engine_is_told_the_batch_bands_priority_only_under_the_priority_scheduler(policy, priority):
    lane = BatchLane(flow_of(saturated_engine(1)), Settings(engine_scheduling_policy=policy))
    assert lane.engine_priority == priority


def test_without_a_batch_band_lines_run_in_the_lowest():
    flow = flow_of(saturated_engine(1), flow_bands="gold,silver,bronze", flow_default_band="silver")
    assert BatchLane(flow, Settings()).band.name == "bronze"


# --- a stopped batch's lines leave the queue (cancel, expiry) -------------------------------

async def test_a_line_waiting_for_its_grant_leaves_the_queue_when_its_batch_stops():
    engine = saturated_engine(1)
    engine.inflight = 0
    flow = flow_of(engine)
    lane = BatchLane(flow, Settings())
    busy = await flow.acquire(interactive(flow))  # the engine's one slot: the line waits
    stop = asyncio.Event()
    line = asyncio.create_task(lane.enter(model=MODEL, owner="key-1", body_bytes=40, max_tokens=8, route=None,
                                          stop=stop))
    await until(lambda: flow.scheduler.queued() == 1)
    stop.set()  # POST /v1/batches/{id}/cancel (the worker's _stop)
    with pytest.raises(LineStopped):
        await asyncio.wait_for(line, timeout=30)  # a hang guard: it ends at the next turns of the loop
    assert flow.scheduler.queued() == 0
    busy.release(100)  # the slot frees: nobody of the stopped batch takes it
    after = await flow.acquire(interactive(flow, "other-app"))
    assert after.engine is engine and flow.scheduler.queued() == 0
    after.release(100)
    slots = flow.scheduler._slots[engine]
    assert (slots.held, slots.lowest) == (0, 0)


async def test_a_line_of_a_stopped_batch_never_asks_and_a_refusal_pause_ends_at_the_stop():
    engine = saturated_engine(1)
    stopped = asyncio.Event()
    stopped.set()
    lane = BatchLane(flow_of(engine), Settings())
    with pytest.raises(LineStopped):
        await lane.enter(model=MODEL, owner="key-1", body_bytes=40, max_tokens=8, route=None, stop=stopped)
    assert lane.flow.scheduler.queued() == 0 and lane.flow.scheduler._slots.get(engine) is None

    class Refusing:
        bands = lane.flow.bands

        async def acquire(self, demand):
            raise QueueRefused("timeout", "waited too long", own_limit=False, retry_after=10)

    never = asyncio.Event()
    waiting = BatchLane(Refusing(), Settings(), pause=lambda seconds: never.wait())  # a pause that never ends
    stop = asyncio.Event()
    line = asyncio.create_task(waiting.enter(model=MODEL, owner="key-1", body_bytes=40, max_tokens=8, route=None,
                                             stop=stop))
    await until(lambda: waiting.refusals == 1)
    stop.set()
    with pytest.raises(LineStopped):
        await asyncio.wait_for(line, timeout=30)


async def test_a_grant_given_in_the_same_instant_as_the_stop_is_given_back():
    engine = saturated_engine(1)
    engine.inflight = 0
    flow = flow_of(engine)
    lane = BatchLane(flow, Settings())
    busy = await flow.acquire(interactive(flow))
    stop = asyncio.Event()
    line = asyncio.create_task(lane.enter(model=MODEL, owner="key-1", body_bytes=40, max_tokens=8, route=None,
                                          stop=stop))
    await until(lambda: flow.scheduler.queued() == 1)
    busy.release(100)  # the line is granted ...
    stop.set()  # ... and its batch stops before the line's task resumes
    with pytest.raises(LineStopped):
        await asyncio.wait_for(line, timeout=30)
    slots = flow.scheduler._slots[engine]
    assert (slots.held, slots.lowest) == (0, 0)  # the grant went back unused
