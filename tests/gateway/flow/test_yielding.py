"""The lowest band yields to the higher bands' live traffic (``flow/yielding.py``), driven by hand.

Each test states the engines and the grants held; nothing sleeps, nothing is timed.
"""

from __future__ import annotations

import math

from gateway.config import Settings
from gateway.flow.control import FlowControl
from gateway.flow.demand import Grant
from gateway.flow.queue import GRANTED, QUEUED, Waiter
from gateway.flow.yielding import lowest_band_room
from tests.gateway.flow.fakes import (
    BATCH,
    INTERACTIVE,
    FakeEngine,
    Picks,
    demand,
    granted,
    make_scheduler,
    queued,
    saturated_engine,
)


def batch_lines(scheduler, count: int, start: int = 0) -> list:
    return [scheduler.offer(demand(key=f"b{n}", band=BATCH)) for n in range(start, start + count)]


def test_the_rule_limits_the_lowest_band_only_while_a_higher_band_is_active():
    assert lowest_band_room(floor=2, lowest_held=30, higher_held=0, higher_waiting=False) == math.inf
    assert lowest_band_room(floor=2, lowest_held=0, higher_held=1, higher_waiting=False) == 2
    assert lowest_band_room(floor=2, lowest_held=1, higher_held=0, higher_waiting=True) == 1
    assert lowest_band_room(floor=2, lowest_held=5, higher_held=3, higher_waiting=False) == -3
    assert lowest_band_room(floor=None, lowest_held=5, higher_held=3, higher_waiting=True) == math.inf


def test_an_unsaturated_engine_takes_every_batch_line_until_an_interactive_request_arrives():
    engine = FakeEngine()  # never seen saturated: no capacity rule holds anything back
    scheduler = make_scheduler([engine], headroom=1, yield_floor=2)
    lines = [granted(outcome) for outcome in batch_lines(scheduler, 8)]
    assert {grant.engine for grant in lines} == {engine}
    chat = granted(scheduler.offer(demand(key="app", band=INTERACTIVE)))  # the higher bands are never held
    more = [queued(outcome) for outcome in batch_lines(scheduler, 3, start=8)]
    for grant in lines[:6]:  # 8 -> 2 batch lines at the engine: still none of the waiting may start
        grant.release(100)
    assert [waiter.state for waiter in more] == [QUEUED] * 3
    lines[6].release(100)  # 1 left: one more may start (the floor is 2)
    assert [waiter.state for waiter in more] == [GRANTED, QUEUED, QUEUED]
    chat.release(100)  # the interactive traffic is gone: the lane grows back at once
    assert [waiter.state for waiter in more] == [GRANTED] * 3


def test_while_interactive_requests_are_in_flight_the_batch_keeps_the_floor_and_no_more():
    engine = FakeEngine()
    scheduler = make_scheduler([engine], yield_floor=1)
    chats = [granted(scheduler.offer(demand(key=f"app{n}", band=INTERACTIVE))) for n in range(4)]
    outcomes = batch_lines(scheduler, 5)
    first = granted(outcomes[0])
    waiting = [queued(outcome) for outcome in outcomes[1:]]
    for chat in chats[:3]:
        chat.release(100)
    assert [waiter.state for waiter in waiting] == [QUEUED] * 4  # one interactive stream is enough to yield to
    first.release(100)
    assert [waiter.state for waiter in waiting] == [GRANTED, QUEUED, QUEUED, QUEUED]  # the floor: one at a time
    chats[3].release(100)
    assert [waiter.state for waiter in waiting] == [GRANTED] * 4


def test_the_yield_is_per_engine_batch_lines_go_where_no_interactive_request_runs():
    busy, idle = FakeEngine(name="busy"), FakeEngine(name="idle")
    scheduler = make_scheduler([busy, idle], yield_floor=1)
    chat = granted(scheduler.offer(demand(key="app", band=INTERACTIVE)))
    assert chat.engine is busy  # the picker's first choice
    lines = [granted(outcome) for outcome in batch_lines(scheduler, 6)]
    assert [grant.engine.name for grant in lines] == ["busy"] + ["idle"] * 5


def test_a_batch_grant_that_moves_to_another_engine_moves_its_count():
    first, second = FakeEngine(name="first"), FakeEngine(name="second")
    scheduler = make_scheduler([first, second], yield_floor=1)
    chat = granted(scheduler.offer(demand(key="app", band=INTERACTIVE)))
    line = granted(scheduler.offer(demand(key="b0", band=BATCH)))
    assert (chat.engine, line.engine) == (first, first)
    line.moved(second)  # a failover before its first byte
    again = granted(scheduler.offer(demand(key="b1", band=BATCH)))
    assert again.engine is first  # the busy engine's one batch slot is free again


def test_without_the_yield_the_batch_keeps_its_slots_beside_interactive_traffic():
    engine = FakeEngine()
    scheduler = make_scheduler([engine], yield_floor=None)
    granted(scheduler.offer(demand(key="app", band=INTERACTIVE)))
    assert all(isinstance(outcome, Grant) for outcome in batch_lines(scheduler, 20))


def test_the_headroom_still_applies_under_the_floor_on_a_saturated_engine():
    engine = saturated_engine(4)
    scheduler = make_scheduler([engine], headroom=1, yield_floor=3)
    lines = [granted(outcome) for outcome in batch_lines(scheduler, 3)]  # 3 = 4 - the headroom
    queued(scheduler.offer(demand(key="b3", band=BATCH)))
    assert len(lines) == 3


def test_the_settings_turn_it_on_with_a_floor_of_two_and_off():
    engine = FakeEngine()

    def floor(**values):
        return FlowControl.from_settings(Settings(**values), engines=lambda: [engine],
                                         pick=Picks([engine])).scheduler.yield_floor

    assert floor() == 2
    assert floor(flow_yield_floor=1) == 1
    assert floor(flow_yield=False) is None
    assert floor(flow_bands=["only"], flow_default_band="only") is None  # no higher band to yield to
