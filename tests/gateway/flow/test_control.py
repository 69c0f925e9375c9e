"""Flow control on a real event loop: waiting, dispatch on release, disconnect while queued, timeout.

Waits are awaited on the outcome itself (with a deadline), never on a sleep.
"""

from __future__ import annotations

import asyncio

import pytest

from gateway.config import Settings
from gateway.flow.bands import InvalidBand
from gateway.flow.control import FlowControl
from gateway.flow.demand import Grant
from gateway.flow.errors import QueueRefused
from gateway.http.queueing import band_error, refusal_error
from tests.gateway.flow.fakes import FakeEngine, Picks, demand, make_scheduler, saturated_engine

DEADLINE = 5.0


async def queued_now(control: FlowControl, count: int) -> None:
    """Let the event loop run until ``count`` requests wait (they queue on their first step)."""
    async with asyncio.timeout(DEADLINE):
        while control.scheduler.queued() != count:
            await asyncio.sleep(0)


async def test_a_request_that_may_go_gets_its_grant_without_waiting():
    control = FlowControl(make_scheduler([saturated_engine(1)]))
    grant = await control.acquire(demand())
    assert isinstance(grant, Grant) and grant.waited == 0.0


async def test_a_queued_request_goes_when_a_slot_is_released():
    engine = saturated_engine(1)
    control = FlowControl(make_scheduler([engine]))
    first = await control.acquire(demand(key="a"))
    second = asyncio.create_task(control.acquire(demand(key="b")))
    await queued_now(control, 1)
    assert not second.done()
    first.release(100)
    grant = await asyncio.wait_for(second, DEADLINE)
    assert grant.engine is engine and grant.demand.key_id == "b"


async def test_a_client_that_disconnects_while_queued_leaves_at_once_and_frees_nothing():
    control = FlowControl(make_scheduler([saturated_engine(1)]))
    first = await control.acquire(demand(key="a"))
    leaving = asyncio.create_task(control.acquire(demand(key="b")))
    staying = asyncio.create_task(control.acquire(demand(key="c")))
    await queued_now(control, 2)
    leaving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leaving
    assert control.scheduler.queued() == 1
    assert not staying.done()  # the slot is still the first request's: nothing was freed
    first.release(100)
    assert (await asyncio.wait_for(staying, DEADLINE)).demand.key_id == "c"


async def test_a_request_cancelled_right_after_its_grant_gives_the_grant_back():
    control = FlowControl(make_scheduler([saturated_engine(1)]))
    first = await control.acquire(demand(key="a"))
    granted_then_cancelled = asyncio.create_task(control.acquire(demand(key="b")))
    await queued_now(control, 1)
    first.release(100)              # b is granted now, but its task has not resumed yet
    granted_then_cancelled.cancel()  # and the client leaves in that instant
    with pytest.raises(asyncio.CancelledError):
        await granted_then_cancelled
    third = await asyncio.wait_for(control.acquire(demand(key="c")), DEADLINE)  # b's slot came back
    assert third.demand.key_id == "c"


async def test_a_request_that_waits_too_long_is_refused():
    scheduler = make_scheduler([saturated_engine(1)], queue_timeout=0.05)
    scheduler.clock = asyncio.get_running_loop().time
    control = FlowControl(scheduler)
    await control.acquire(demand(key="a"))
    with pytest.raises(QueueRefused) as refused:
        await asyncio.wait_for(control.acquire(demand(key="b")), DEADLINE)
    assert refused.value.reason == "timeout" and scheduler.queued() == 0
    control.close()


async def test_the_timer_follows_the_oldest_waiter_as_others_leave():
    scheduler = make_scheduler([saturated_engine(1)], queue_timeout=0.05)
    scheduler.clock = asyncio.get_running_loop().time
    control = FlowControl(scheduler)
    first = await control.acquire(demand(key="a"))
    early = asyncio.create_task(control.acquire(demand(key="b")))
    await queued_now(control, 1)
    late = asyncio.create_task(control.acquire(demand(key="c")))
    await queued_now(control, 2)
    first.release(100)  # the waiter the timer was armed for goes: the timer must still refuse the next
    await asyncio.wait_for(early, DEADLINE)
    with pytest.raises(QueueRefused):
        await asyncio.wait_for(late, DEADLINE)
    control.close()


async def test_a_stopping_gateway_refuses_every_waiting_request_at_once():
    control = FlowControl(make_scheduler([saturated_engine(1)]))
    await control.acquire(demand(key="a"))
    waiting = [asyncio.create_task(control.acquire(demand(key=key))) for key in ("b", "c")]
    await queued_now(control, 2)
    control.close()
    for task in waiting:
        with pytest.raises(QueueRefused) as refused:
            await asyncio.wait_for(task, DEADLINE)
        assert (refused.value.reason, refused.value.own_limit) == ("shutdown", False)
    assert control.scheduler.queued() == 0


async def test_engines_that_left_the_fleet_are_forgotten_once_nothing_is_held_there():
    leaving, staying = saturated_engine(1, name="leaving"), saturated_engine(1, name="staying")
    fleet = [leaving, staying]
    control = FlowControl(make_scheduler(fleet))
    on_leaving = await control.acquire(demand(key="a"))
    assert on_leaving.engine is leaving
    fleet.remove(leaving)
    control.capacity_changed()
    assert leaving in control.scheduler.tracked()  # a request is still open there
    on_leaving.release(100)
    control.capacity_changed()
    assert leaving not in control.scheduler.tracked()


async def test_flow_control_is_built_from_the_settings():
    engine = FakeEngine()
    control = FlowControl.from_settings(
        Settings(flow_queue_max=7, flow_queue_max_per_key=3, flow_queue_timeout_seconds=12, flow_aging_seconds=4,
                 flow_engine_max_waiting=2, flow_bands="gold,silver", flow_default_band="silver"),
        engines=lambda: [engine], pick=Picks([engine]))
    scheduler = control.scheduler
    assert (scheduler.max_queued, scheduler.max_queued_per_key, scheduler.queue_timeout, scheduler.aging,
            scheduler.engine_max_waiting) == (7, 3, 12, 4, 2)
    assert control.bands.names == ("gold", "silver")


def test_refusals_are_429_for_the_keys_own_limit_and_503_for_a_full_fleet():
    own = refusal_error(QueueRefused("timeout", "waited", own_limit=True, retry_after=1))
    fleet = refusal_error(QueueRefused("queue_full", "full", own_limit=False, retry_after=7))
    assert (own.status, own.code, own.headers) == (429, "queue_timeout", {"retry-after": "1"})
    assert (fleet.status, fleet.code, fleet.headers) == (503, "queue_full", {"retry-after": "7"})
    assert fleet.envelope()["error"]["type"] == "service_unavailable"


def test_an_unknown_band_is_a_400_naming_the_field():
    error = band_error(InvalidBand("x-priority", "urgent", ("interactive", "batch")))
    assert (error.status, error.param, error.code) == (400, "x-priority", "invalid_priority")
    assert "x-priority must be one of interactive, batch; got 'urgent'" in error.message

