"""The scheduler driven by hand: capacity, priority bands, aging, limits, bounds, cancel, metrics.

Every test states the engines' capacity explicitly (a scrape reading, releases) and moves a
fake clock; nothing sleeps.
"""

from __future__ import annotations

import math

import pytest

from gateway.flow.demand import DEFAULT_COMPLETION_ESTIMATE, Grant, estimated_tokens, queue_wait_header
from gateway.flow.errors import QueueRefused
from gateway.flow.queue import CANCELLED, GRANTED, QUEUED, REFUSED, Waiter
from gateway.http.metrics import Metrics
from tests.gateway.flow.fakes import (
    BATCH,
    INTERACTIVE,
    MODEL,
    STANDARD,
    Clock,
    FakeEngine,
    demand,
    granted,
    make_scheduler,
    queued,
    saturated_engine,
)

# --- capacity -----------------------------------------------------------------------------

def test_a_request_goes_at_once_when_there_is_room_and_nothing_waits():
    engine = saturated_engine(2)
    scheduler = make_scheduler([engine])
    grant = granted(scheduler.offer(demand()))
    assert grant.engine is engine and grant.waited == 0.0
    assert queue_wait_header(grant) == (b"x-queue-wait-ms", b"0")


def test_an_engine_never_seen_saturated_is_not_held_back():
    engine = FakeEngine()
    engine.scrape(running=40, waiting=0)
    scheduler = make_scheduler([engine])
    grants = [granted(scheduler.offer(demand(key=f"k{i}"))) for i in range(200)]
    assert {grant.engine for grant in grants} == {engine}


def test_a_scrape_with_requests_waiting_teaches_the_engines_concurrency():
    engine = FakeEngine()
    scheduler = make_scheduler([engine], engine_max_waiting=1)
    first = [granted(scheduler.offer(demand(key=f"k{i}"))) for i in range(5)]
    engine.inflight = 5
    engine.scrape(running=3, waiting=2)  # it runs 3 at once; 2 of ours wait inside it
    scheduler.capacity_changed()
    # Concurrency 3, and one may wait inside: 4 slots, while this gateway holds 5 there.
    later = queued(scheduler.offer(demand(key="k9")))
    for grant, state in zip(first[:2], (QUEUED, GRANTED), strict=True):
        engine.inflight -= 1  # the engine request closed, then its grant is released
        grant.release(100)
        assert later.state == state


def test_load_from_elsewhere_takes_slots_too():
    engine = FakeEngine()
    engine.scrape(running=4, waiting=1, own=0)  # another gateway replica's requests
    scheduler = make_scheduler([engine], engine_max_waiting=2)
    # Concurrency 4 + 2 waiting allowed - 5 from elsewhere: one slot for this gateway.
    granted(scheduler.offer(demand(key="a")))
    queued(scheduler.offer(demand(key="b")))
    engine.scrape(running=4, waiting=0, own=1)  # elsewhere finished one: 3 from elsewhere now
    scheduler.capacity_changed()
    assert scheduler.queued() == 0


def test_a_release_frees_its_slot_at_once_without_a_scrape():
    engine = saturated_engine(1)
    scheduler = make_scheduler([engine])
    first = granted(scheduler.offer(demand(key="a")))
    second = queued(scheduler.offer(demand(key="b")))
    first.release(100)
    assert second.state == GRANTED and second.outcome.engine is engine


def test_a_scrape_with_none_waiting_lets_the_concurrency_grow_by_one():
    engine = saturated_engine(2)
    scheduler = make_scheduler([engine])
    grants = [granted(scheduler.offer(demand(key=f"k{i}"))) for i in range(2)]
    waiter = queued(scheduler.offer(demand(key="x")))
    engine.inflight = 2
    engine.scrape(running=2, waiting=0)  # running everything it was given, nobody waiting: maybe room
    scheduler.capacity_changed()
    assert waiter.state == GRANTED and len(grants) == 2
    queued(scheduler.offer(demand(key="y")))  # one step only: 3 now


def test_saturated_engines_are_excluded_from_the_pick():
    full, free = saturated_engine(1, name="full"), saturated_engine(1, name="free")
    scheduler = make_scheduler([full, free])
    assert granted(scheduler.offer(demand(key="a"))).engine is full
    assert granted(scheduler.offer(demand(key="b"))).engine is free
    picks = scheduler._pick.calls
    assert picks[-1][1] == [full]


def test_no_routable_engine_means_no_gating_the_router_answers_for_it():
    engine = saturated_engine(1)
    engine.ready = False
    scheduler = make_scheduler([engine])
    grants = [granted(scheduler.offer(demand(key=f"k{i}"))) for i in range(3)]
    assert [grant.engine for grant in grants] == [None, None, None]


def test_a_request_moved_to_another_engine_is_counted_there():
    one, two = saturated_engine(1, name="one"), saturated_engine(1, name="two")
    scheduler = make_scheduler([one, two])
    grant = granted(scheduler.offer(demand(key="a")))
    grant.moved(two)
    assert granted(scheduler.offer(demand(key="b"))).engine is one
    queued(scheduler.offer(demand(key="c")))


# --- priority bands and aging ----------------------------------------------------------------

def fill(scheduler, slots: int) -> list[Grant]:
    return [granted(scheduler.offer(demand(key=f"filler-{i}", band=INTERACTIVE))) for i in range(slots)]


def test_higher_bands_are_dispatched_first():
    scheduler = make_scheduler([saturated_engine(1)])
    [running] = fill(scheduler, 1)
    waiters = [queued(scheduler.offer(demand(key=band.name, band=band))) for band in (BATCH, STANDARD, INTERACTIVE)]
    order: list[str] = []
    for _ in waiters:
        running.release(100)
        [went] = [w for w in waiters if w.state == GRANTED and w.demand.key_id not in order]
        order.append(went.demand.key_id)
        running = went.outcome
    assert order == ["interactive", "standard", "batch"]


def interactive_flood(scheduler, clock: Clock, running: list[Grant], watched: list[Waiter],
                      seconds: int) -> dict[str, float]:
    """Each second a fresh interactive request arrives, then a slot frees; when each watched key went."""
    waiting = list(watched)
    went: dict[str, float] = {}
    for second in range(seconds):
        clock.advance(1.0)
        waiting.append(queued(scheduler.offer(demand(key=f"i-{second}", band=INTERACTIVE))))
        running.pop(0).release(100)
        for waiter in [waiter for waiter in waiting if waiter.state == GRANTED]:
            waiting.remove(waiter)
            running.append(waiter.outcome)
            went[waiter.demand.key_id] = clock.now
    return {key: at for key, at in went.items() if not key.startswith("i-")}


def test_aging_bounds_the_lowest_bands_wait_under_an_interactive_flood():
    clock = Clock()
    scheduler = make_scheduler([saturated_engine(1)], clock, aging=10.0)
    running = fill(scheduler, 1)
    batch = [queued(scheduler.offer(demand(key=f"batch-{n}", band=BATCH))) for n in (1, 2, 3)]
    went = interactive_flood(scheduler, clock, running, batch, 40)
    # The band is served once per aging period: its n-th waits at most n x (10 s + the next slot, 1 s).
    assert went["batch-1"] <= 11 and went["batch-2"] <= 22 and went["batch-3"] <= 33
    assert went["batch-1"] >= 10  # strict priority until then: the interactive requests went first


def test_without_aging_an_interactive_flood_starves_the_lowest_band():
    clock = Clock()
    scheduler = make_scheduler([saturated_engine(1)], clock, aging=math.inf)
    running = fill(scheduler, 1)
    batch = [queued(scheduler.offer(demand(key="batch-1", band=BATCH)))]
    assert interactive_flood(scheduler, clock, running, batch, 40) == {}  # what aging is for


def test_a_bands_own_backlog_never_ages_it_ahead_of_a_higher_band():
    clock = Clock()
    scheduler = make_scheduler([saturated_engine(1)], clock, aging=10.0)
    running = granted(scheduler.offer(demand(key="first", band=BATCH)))
    backlog = [queued(scheduler.offer(demand(key=f"b{i}", band=BATCH))) for i in range(20)]
    for i in range(12):  # the batch band is served every second: its clock restarts each time
        clock.advance(1.0)
        running.release(100)
        running = backlog[i].outcome
    assert clock.now - backlog[12].enqueued_at == 12.0  # its next request has waited longer than the aging
    urgent = queued(scheduler.offer(demand(key="urgent", band=INTERACTIVE)))
    running.release(100)
    assert urgent.state == GRANTED and backlog[12].state == QUEUED


# --- limits of keys and teams ---------------------------------------------------------------

def test_a_key_at_its_concurrency_limit_waits_and_goes_when_its_own_request_ends():
    scheduler = make_scheduler([saturated_engine(10)])
    mine = [granted(scheduler.offer(demand(key="k", key_limit=2))) for _ in range(2)]
    third = queued(scheduler.offer(demand(key="k", key_limit=2)))
    mine[0].release(100)
    assert third.state == GRANTED


def test_a_key_at_its_limit_holds_up_nobody_else():
    scheduler = make_scheduler([saturated_engine(10)])
    granted(scheduler.offer(demand(key="busy", key_limit=1)))
    blocked = queued(scheduler.offer(demand(key="busy", key_limit=1)))
    other = scheduler.offer(demand(key="other"))  # arrives after a waiting request, still goes now
    assert granted(other).demand.key_id == "other" and blocked.state == QUEUED


def test_a_teams_limit_counts_all_its_keys_and_a_key_at_its_own_limit_does_not_block_its_team():
    scheduler = make_scheduler([saturated_engine(10)])
    a1 = granted(scheduler.offer(demand(key="a", team="t", key_limit=1, team_limit=3)))
    a2 = queued(scheduler.offer(demand(key="a", team="t", key_limit=1, team_limit=3)))
    granted(scheduler.offer(demand(key="b", team="t", key_limit=5, team_limit=3)))
    granted(scheduler.offer(demand(key="b", team="t", key_limit=5, team_limit=3)))
    b3 = queued(scheduler.offer(demand(key="b", team="t", key_limit=5, team_limit=3)))  # team at 3
    a1.release(100)  # frees a's key and a team slot: a2 (older) goes, b3 still waits for the team
    assert a2.state == GRANTED and b3.state == QUEUED


# --- bounds ---------------------------------------------------------------------------------

def test_a_keys_full_share_of_the_queue_is_429_and_a_full_queue_503():
    scheduler = make_scheduler([saturated_engine(1)], max_queued=3, max_queued_per_key=2)
    fill(scheduler, 1)
    queued(scheduler.offer(demand(key="a")))
    second = queued(scheduler.offer(demand(key="a")))
    with pytest.raises(QueueRefused) as own:
        scheduler.offer(demand(key="a"))
    assert (own.value.reason, own.value.own_limit, own.value.retry_after) == ("key_queue_full", True, 1)
    queued(scheduler.offer(demand(key="b")))
    # Full: the tenant with the most waiting (a, 2) gives its newest up to one with none (429: a's excess).
    queued(scheduler.offer(demand(key="c")))
    assert second.state == REFUSED and (second.outcome.reason, second.outcome.own_limit) == ("displaced", True)
    with pytest.raises(QueueRefused) as fleet:  # one each now: nobody's excess to give up
        scheduler.offer(demand(key="d"))
    assert (fleet.value.reason, fleet.value.own_limit) == ("queue_full", False)
    assert fleet.value.retry_after >= 1


def test_a_full_queue_gives_the_newest_lowest_band_place_to_a_higher_band():
    scheduler = make_scheduler([saturated_engine(1)], max_queued=2)
    fill(scheduler, 1)
    old = queued(scheduler.offer(demand(key="old", band=BATCH)))
    new = queued(scheduler.offer(demand(key="new", band=BATCH)))
    urgent = queued(scheduler.offer(demand(key="urgent", band=INTERACTIVE)))
    assert new.state == REFUSED and new.outcome.reason == "displaced" and not new.outcome.own_limit
    assert old.state == QUEUED and scheduler.queued(MODEL) == 2
    with pytest.raises(QueueRefused):  # nothing lower than batch to give way
        scheduler.offer(demand(key="later", band=BATCH))
    assert urgent.state == QUEUED


def test_a_request_that_waits_too_long_is_refused_503_when_the_fleet_was_full():
    clock = Clock()
    scheduler = make_scheduler([saturated_engine(1)], clock, queue_timeout=30.0)
    fill(scheduler, 1)
    waiter = queued(scheduler.offer(demand(key="a")))
    assert scheduler.next_deadline() == 30.0
    clock.advance(29.9)
    assert scheduler.expire() == 0 and waiter.state == QUEUED
    clock.advance(0.1)
    assert scheduler.expire() == 1
    assert waiter.state == REFUSED
    assert (waiter.outcome.reason, waiter.outcome.own_limit) == ("timeout", False)
    assert scheduler.queued() == 0 and scheduler.next_deadline() is None


def test_a_request_that_waits_too_long_for_its_own_key_is_refused_429():
    clock = Clock()
    scheduler = make_scheduler([saturated_engine(10)], clock, queue_timeout=5.0)
    granted(scheduler.offer(demand(key="k", key_limit=1)))
    waiter = queued(scheduler.offer(demand(key="k", key_limit=1)))
    clock.advance(5.0)
    scheduler.expire()
    assert (waiter.outcome.reason, waiter.outcome.own_limit, waiter.outcome.retry_after) == ("timeout", True, 1)


def test_retry_after_for_a_full_fleet_follows_the_typical_wait():
    clock = Clock()
    scheduler = make_scheduler([saturated_engine(1)], clock, max_queued=1)
    [running] = fill(scheduler, 1)
    for _ in range(30):  # every request waits 8 s for the slot
        waiter = queued(scheduler.offer(demand(key="w")))
        clock.advance(8.0)
        running.release(100)
        running = waiter.outcome
    queued(scheduler.offer(demand(key="x")))
    with pytest.raises(QueueRefused) as refused:
        scheduler.offer(demand(key="y"))
    assert refused.value.retry_after == 8


# --- leaving the queue --------------------------------------------------------------------

def test_a_cancelled_waiter_leaves_at_once_and_frees_nothing_it_did_not_hold():
    scheduler = make_scheduler([saturated_engine(1)])
    [running] = fill(scheduler, 1)
    gone = queued(scheduler.offer(demand(key="gone")))
    stays = queued(scheduler.offer(demand(key="stays")))
    scheduler.cancel(gone)
    assert gone.state == CANCELLED and scheduler.queued() == 1
    queued(scheduler.offer(demand(key="more")))  # the slot is still held: nothing was freed
    running.release(100)
    assert stays.state == GRANTED and gone.state == CANCELLED
    scheduler.cancel(gone)  # again: nothing happens
    assert scheduler.queued() == 1


def test_a_grant_released_twice_frees_one_slot():
    scheduler = make_scheduler([saturated_engine(1)])
    [running] = fill(scheduler, 1)
    first = queued(scheduler.offer(demand(key="a")))
    second = queued(scheduler.offer(demand(key="b")))
    running.release(100)
    running.release(100)
    assert first.state == GRANTED and second.state == QUEUED


# --- metrics ------------------------------------------------------------------------------

def sample(metrics: Metrics, name: str, **labels) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_queue_length_wait_and_drops_are_recorded_per_model_and_band():
    clock, metrics = Clock(), Metrics()
    scheduler = make_scheduler([saturated_engine(1)], clock, metrics=metrics, max_queued=2)
    [running] = fill(scheduler, 1)
    batch, interactive = {"model": MODEL, "band": "batch"}, {"model": MODEL, "band": "interactive"}
    first = queued(scheduler.offer(demand(key="a", band=BATCH)))
    queued(scheduler.offer(demand(key="b", band=BATCH)))
    assert sample(metrics, "gateway_queue_length", **batch) == 2
    urgent = queued(scheduler.offer(demand(key="c", band=INTERACTIVE)))  # full: b gives way
    assert sample(metrics, "gateway_queue_dropped_total", **batch, reason="displaced") == 1
    with pytest.raises(QueueRefused):
        scheduler.offer(demand(key="d", band=BATCH))
    assert sample(metrics, "gateway_queue_dropped_total", **batch, reason="queue_full") == 1
    assert (sample(metrics, "gateway_queue_length", **batch), sample(metrics, "gateway_queue_length", **interactive)) \
        == (1, 1)
    clock.advance(2.5)
    running.release(100)
    clock.advance(1.0)
    urgent.outcome.release(100)
    assert first.outcome.waited == 3.5 and queue_wait_header(first.outcome) == (b"x-queue-wait-ms", b"3500")
    assert sample(metrics, "gateway_queue_length", **batch) == 0
    assert sample(metrics, "gateway_queue_wait_seconds_count", **batch) == 1
    assert sample(metrics, "gateway_queue_wait_seconds_sum", **batch) == 3.5
    assert sample(metrics, "gateway_queue_wait_seconds_count", **interactive) == 2  # the filler (0 s) and c
    assert sample(metrics, "gateway_queue_wait_seconds_sum", **interactive) == 2.5


def test_a_requests_cost_is_estimated_from_its_size_and_the_completion_it_may_ask_for():
    assert estimated_tokens(4000, 100) == 1100
    assert estimated_tokens(4000) == 1000 + DEFAULT_COMPLETION_ESTIMATE
    assert estimated_tokens(4000, True) == estimated_tokens(4000, "12") == estimated_tokens(4000, -5) \
        == 1000 + DEFAULT_COMPLETION_ESTIMATE
    assert estimated_tokens(0, 1) == 2


# --- headroom: the lowest band leaves running slots to the others --------------------------

def test_the_lowest_band_leaves_a_slot_to_the_higher_bands_once_the_engine_was_seen_saturated():
    engine = saturated_engine(4)  # its concurrency (4) is known; the requests seen were this gateway's
    scheduler = make_scheduler([engine], engine_max_waiting=2, headroom=1)
    batch = [granted(scheduler.offer(demand(key=f"b{i}", band=BATCH))) for i in range(3)]
    fourth = queued(scheduler.offer(demand(key="b3", band=BATCH)))  # not the last slot, nor a wait inside
    interactive = granted(scheduler.offer(demand(key="i", band=INTERACTIVE)))
    assert interactive.engine is engine
    batch[0].release(100)
    assert fourth.state == QUEUED  # a slot freed, but taking it would leave none free
    interactive.release(100)
    assert fourth.state == GRANTED  # now one stays free after it
    later = queued(scheduler.offer(demand(key="b4", band=BATCH)))
    standard = [granted(scheduler.offer(demand(key=f"s{i}"))) for i in range(3)]  # 1 slot + 2 waiting inside
    assert [grant.engine for grant in standard] == [engine] * 3 and later.state == QUEUED


def test_without_headroom_or_before_saturation_the_lowest_band_takes_every_slot():
    engine = saturated_engine(4)
    scheduler = make_scheduler([engine], engine_max_waiting=2, headroom=0)
    assert len([granted(scheduler.offer(demand(key=f"b{i}", band=BATCH))) for i in range(6)]) == 6
    fresh = FakeEngine()  # concurrency unknown: never held back, headroom or not
    unknown = make_scheduler([fresh], headroom=1)
    assert len([granted(unknown.offer(demand(key=f"b{i}", band=BATCH))) for i in range(50)]) == 50


def test_an_engine_that_runs_one_request_still_serves_the_lowest_band():
    engine = saturated_engine(1)
    scheduler = make_scheduler([engine], headroom=3)
    granted(scheduler.offer(demand(key="b", band=BATCH)))
