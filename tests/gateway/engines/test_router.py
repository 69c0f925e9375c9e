"""The router on engines whose state a test sets: model filter, readiness, ejection, each policy's choice.

Load scoring, prefix affinity and its bound, session stickiness and re-pin, model routing,
and the same decisions in two routers that know the same engines (as two gateway replicas).
"""

from __future__ import annotations

import time
from collections import Counter

import pytest

from gateway.engines.engine import Engine
from gateway.engines.fleet import Fleet
from gateway.engines.router import Router, make_policy
from gateway.engines.routing import RouteHints
from gateway.engines.scrape import Load
from gateway.http.metrics import Metrics

URLS = ["http://10.0.0.1:8000", "http://10.0.0.2:8000", "http://10.0.0.3:8000"]


def fleet_of(urls=URLS, *, models=("m",), metrics=None) -> Fleet:
    fleet = Fleet([(url, None) for url in urls], metrics=metrics)
    for engine in fleet:
        engine.ready, engine.models = True, list(models)
    return fleet


def router(policy="prefix", urls=URLS, **kwargs) -> Router:
    fleet = fleet_of(urls, **kwargs)
    return Router(fleet, make_policy(policy, load_bound=1.25), metrics=kwargs.get("metrics"))


def by_url(router: Router) -> dict[str, Engine]:
    return {engine.id: engine for engine in router.fleet}


# --- load scoring ------------------------------------------------------------------------------
def test_score_weighs_waiting_four_times_running_and_counts_own_requests_since_the_scrape():
    engine = Engine("http://e:1")
    assert engine.score() == 0
    engine.inflight = 2
    engine.scraped(Load(running=3, waiting=1))  # the scrape saw our 2 among its 3 running
    assert engine.score() == 3 + 4 * 1
    engine.inflight = 4  # two more sent since the scrape
    assert engine.score() == 3 + 4 + 2
    engine.inflight = 1  # finished ones are not subtracted before the next scrape
    assert engine.score() == 7


def test_score_is_never_below_this_gateways_own_open_requests():
    engine = Engine("http://e:1")
    engine.inflight = 5
    engine.scraped(Load(running=0, waiting=0))  # a scrape that lags behind the requests just sent
    assert engine.score() == 5


def test_least_load_picks_the_lowest_score():
    r = router("least_load")
    engines = by_url(r)
    engines[URLS[0]].scraped(Load(running=5))
    engines[URLS[1]].scraped(Load(running=1, waiting=1))  # 5
    engines[URLS[2]].scraped(Load(running=2))
    assert r.pick(RouteHints(model="m")).id == URLS[2]


def test_a_burst_between_two_scrapes_spreads_over_the_engines():
    r = router("least_load")
    for engine in r.fleet:
        engine.scraped(Load())
    picked = []
    for _ in range(9):
        engine = r.pick(RouteHints(model="m"))
        engine.inflight += 1  # what the client does for each request it sends
        picked.append(engine.id)
    assert Counter(picked) == {URLS[0]: 3, URLS[1]: 3, URLS[2]: 3}


def test_round_robin_takes_each_engine_in_turn_whatever_the_load():
    r = router("round_robin")
    by_url(r)[URLS[0]].scraped(Load(running=100))
    assert [r.pick(None).id for _ in range(6)] == URLS + URLS


# --- prefix affinity and its bound ---------------------------------------------------------------
def test_requests_sharing_a_prefix_go_to_one_engine_and_different_prefixes_spread():
    r = router()
    first = r.pick(RouteHints(model="m", prefix=b"conversation-7 opening"))
    assert all(r.pick(RouteHints(model="m", prefix=b"conversation-7 opening")) is first for _ in range(20))
    spread = Counter(r.pick(RouteHints(model="m", prefix=f"conversation-{i}".encode())).id for i in range(300))
    assert set(spread) == set(URLS)
    assert all(60 <= count <= 140 for count in spread.values()), spread


def test_a_prefix_spills_to_its_next_engine_when_its_engine_is_over_the_bound():
    r = router(urls=URLS[:2])
    hints = RouteHints(model="m", prefix=b"shared system prompt")
    home = r.pick(hints)
    other = next(engine for engine in r.fleet if engine is not home)
    home.inflight = 2  # bound: ceil(1.25 x (2 + 0 + 1) / 2) = 2 -> 2 + 1 > 2: over
    assert r.pick(hints) is other
    home.inflight = 1  # ceil(1.25 x 2 / 2) = 2 -> 1 + 1 <= 2: still home
    assert r.pick(hints) is home


def test_the_decision_says_why():
    metrics = Metrics()
    r = router(urls=URLS[:2], metrics=metrics)
    hints = RouteHints(model="m", prefix=b"p")
    home = r.pick(hints)
    home.inflight = 5
    r.pick(hints)
    r.pick(RouteHints(model="m"))
    text = metrics.render().decode()
    for reason, count in (("prefix", 1), ("prefix_overflow", 1), ("least_load", 1)):
        assert f'gateway_routing_decisions_total{{policy="prefix",reason="{reason}"}} {count}.0' in text


# --- session stickiness and re-pin -----------------------------------------------------------------
@pytest.mark.parametrize("policy", ["prefix", "affinity", "session"])  # ("session": affinity's name before)
def test_an_affinity_key_sticks_to_its_engine_repins_when_it_is_down_and_returns(policy):
    r = router(policy)
    hints = RouteHints(model="m", affinity_key="user-42", prefix=b"ignored when a key is given")
    home = r.pick(hints)
    assert all(r.pick(hints) is home for _ in range(10))
    home.ready = False
    moved = r.pick(hints)
    assert moved is not home and all(r.pick(hints) is moved for _ in range(5))
    home.ready = True
    assert r.pick(hints) is home


def test_the_session_key_wins_over_the_prefix():
    r = router()
    keyed = [r.pick(RouteHints(model="m", affinity_key="k", prefix=f"p{i}".encode())) for i in range(20)]
    assert len({engine.id for engine in keyed}) == 1


def test_an_ejected_engine_gets_nothing_until_its_ejection_ends():
    r = router()
    hints = RouteHints(model="m", affinity_key="user-42")
    home = r.pick(hints)
    r.fleet.failed(home, "refused", "connection refused")
    assert home.ejected and r.pick(hints) is not home
    home.ejected_until = time.monotonic()  # the ejection ran out
    assert r.pick(hints) is home


def test_ejection_doubles_for_ejections_in_a_row_and_a_success_resets_it():
    engine = Engine("http://e:1")

    def eject_after_the_last_ran_out() -> float:
        engine.ejected_until = 0.0
        return engine.eject(5.0, kind="reset", message="")

    assert [eject_after_the_last_ran_out() for _ in range(6)] == [5, 10, 20, 40, 60, 60]
    engine.succeeded()
    assert eject_after_the_last_ran_out() == 5


def test_failures_while_ejected_are_one_incident():
    engine = Engine("http://e:1")
    first = engine.eject(5.0, kind="reset", message="")
    until = engine.ejected_until
    for _ in range(5):  # the other requests that were open on it fail at the same moment
        assert engine.eject(5.0, kind="disconnected", message="") <= first
    assert engine.ejected_until == until and engine.failures_in_a_row == 1


def test_with_every_engine_ejected_the_one_back_first_is_used_rather_than_refusing():
    r = router(urls=URLS[:2])
    first, second = r.fleet.engines
    first.ejected_until = time.monotonic() + 30
    second.ejected_until = time.monotonic() + 10
    assert r.pick(RouteHints(model="m")) is second


def test_an_engine_that_is_not_ready_never_gets_a_request():
    r = router(urls=URLS[:2])
    first, second = r.fleet.engines
    second.ready = False
    assert {r.pick(RouteHints(model="m", prefix=f"{i}".encode())).id for i in range(50)} == {first.id}
    first.ready = False
    assert r.pick(RouteHints(model="m")) is None


def test_a_request_does_not_go_back_to_an_engine_it_failed_on():
    r = router(urls=URLS[:2])
    first, second = r.fleet.engines
    assert r.pick(RouteHints(model="m", affinity_key="x"), exclude=[first]) is second
    assert r.pick(RouteHints(model="m", affinity_key="x", avoid=(second.id,)), exclude=[first]) is None


# --- model routing ----------------------------------------------------------------------------------
def test_only_engines_serving_the_model_qualify():
    fleet = fleet_of()
    a, b, c = fleet.engines
    a.models, b.models, c.models = ["small"], ["large"], ["small", "large"]
    r = Router(fleet, make_policy("least_load"))
    assert {r.pick(RouteHints(model="large")).id for _ in range(10)} == {b.id, c.id}
    assert {r.pick(RouteHints(model="small")).id for _ in range(10)} == {a.id, c.id}
    assert r.pick(RouteHints(model="other")) is None
    assert "no inference engine is ready" in r.unavailable(RouteHints(model="other")).message
    c.ready = b.ready = False
    assert r.pick(RouteHints(model="large")) is None
    assert r.unavailable(RouteHints(model="large")).message == "no inference engine serving 'large' is ready"


# --- the same on every replica ------------------------------------------------------------------------
def test_two_routers_that_know_the_same_engines_decide_alike_whatever_order_they_learnt_them_in():
    one = router(urls=URLS)
    other = router(urls=list(reversed(URLS)))
    keys = [f"session-{i}" for i in range(200)]
    prefixes = [f"prefix-{i}".encode() for i in range(200)]
    assert [one.pick(RouteHints(model="m", affinity_key=k)).id for k in keys] == \
        [other.pick(RouteHints(model="m", affinity_key=k)).id for k in keys]
    assert [one.pick(RouteHints(model="m", prefix=p)).id for p in prefixes] == \
        [other.pick(RouteHints(model="m", prefix=p)).id for p in prefixes]


def test_an_engine_leaving_moves_only_its_own_keys():
    full = router(urls=URLS)
    smaller = router(urls=URLS[:2])
    keys = [f"session-{i}" for i in range(300)]
    before = {k: full.pick(RouteHints(model="m", affinity_key=k)).id for k in keys}
    after = {k: smaller.pick(RouteHints(model="m", affinity_key=k)).id for k in keys}
    moved = [k for k in keys if before[k] != after[k]]
    assert moved and all(before[k] == URLS[2] for k in moved)
