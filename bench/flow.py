"""Flow control's scheduler on its own: its CPU per request, and what it does under load (a simulation).

    python -m bench.flow [--requests 20000] [--rounds 7] [--engines 2] [--quick]

**Cost** (CPU time of this thread, per request), in interleaved rounds, medians reported:

- ``queue-less``: what today's path does for the same concerns: ``Admission.try_enter`` and
  ``leave`` (the in-flight caps) and ``Router.pick`` (least load over real ``Engine`` objects);
- ``flow, no contention``: ``await FlowControl.acquire`` (the scheduler's fast path: capacity of
  each engine, key and team counts, the in-flight caps ``MAX_INFLIGHT``/``MAX_INFLIGHT_PER_KEY``
  counted over the grants and the admission counters, fairness charge, the pick, the wait
  histogram) and ``Grant.release``, on the same engines with room to spare, plus the
  middleware's question whether admission counts the request (with flow control on it does
  not: the caps are the flow's, ``gateway.flow.caps``);
- ``flow, queued``: every request queues behind a full engine and is dispatched by the release
  of the one before it (the slow path, without the event loop's scheduling of the waiter).

The ratio flow/queue-less is the scheduler's cost next to what it replaces; the difference in
microseconds is set against the ~300-400 us of CPU a whole relayed request costs
(docs/benchmarks.md).

**Simulation** (a fake clock; the scheduler drives itself):

- fairness: two tenants of equal weight offer 10:1; tokens served while both are backlogged,
  their ratio and Jain's index (targets: within 1.5:1, >= 0.9);
- priority: a saturated engine with the three bands offered in equal parts; mean and max wait per band;
- aging: an interactive flood keeps the slot busy; the waits of ten batch requests against
  the documented bound (n x (FLOW_AGING_SECONDS + one slot)).

Writes bench/results/flow.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections import deque
from pathlib import Path

from gateway.engines.engine import Engine
from gateway.engines.fleet import Fleet
from gateway.engines.policies.least_load import LeastLoad
from gateway.engines.router import Router
from gateway.engines.routing import RouteHints
from gateway.engines.scrape import Load
from gateway.flow.bands import Bands
from gateway.flow.caps import InflightCaps
from gateway.flow.control import FlowControl
from gateway.flow.demand import Demand, Grant
from gateway.flow.errors import QueueRefused
from gateway.flow.queue import GRANTED, QUEUED, Waiter
from gateway.flow.scheduler import Scheduler
from gateway.http.admission import Admission
from gateway.http.metrics import Metrics

RESULTS = Path(__file__).resolve().parent / "results"
MODEL = "bench-model"
CHAT = "/v1/chat/completions"
BANDS = Bands(["interactive", "standard", "batch"], "standard")
INTERACTIVE, STANDARD, BATCH = BANDS.all


# --- cost ---------------------------------------------------------------------------------------

def engines(count: int, concurrency: int) -> tuple[Fleet, Router]:
    fleet = Fleet([(f"http://127.0.0.1:{9000 + i}", None) for i in range(count)])
    for engine in fleet.engines:
        seen_saturated(engine, concurrency)
    return fleet, Router(fleet, LeastLoad())


def seen_saturated(engine: Engine, concurrency: int) -> None:
    """A scrape of ``engine`` running ``concurrency`` requests of this gateway's, one more waiting; all done since."""
    engine.ready, engine.models = True, [MODEL]
    engine.inflight = concurrency + 1
    engine.scraped(Load(running=concurrency, waiting=1))
    engine.inflight = 0


def scheduler(fleet: Fleet, router: Router, *, max_waiting: int = 0, caps: InflightCaps | None = None) -> Scheduler:
    return Scheduler(BANDS, engines=lambda: fleet.engines, pick=lambda demand, full: router.pick(demand.route, full),
                     max_queued=1_000_000, max_queued_per_key=1_000_000, queue_timeout=30.0, aging=10.0,
                     engine_max_waiting=max_waiting, metrics=Metrics(), caps=caps)


def queueless(requests: int, fleet: Fleet, router: Router) -> float:
    admission = Admission(max_inflight=512, max_inflight_per_key=128)
    route = RouteHints(model=MODEL)
    start = time.thread_time()
    for i in range(requests):
        key = f"key-{i & 7}"
        admission.try_enter(key)
        router.pick(route, ())
        admission.leave(key)
    return (time.thread_time() - start) / requests


async def uncontended(requests: int, fleet: Fleet, router: Router) -> float:
    admission = Admission(max_inflight=512, max_inflight_per_key=128)
    control = FlowControl(scheduler(fleet, router, caps=InflightCaps(512, 128, admission)))
    admission.defer({CHAT}, control.capacity_changed)
    demands = [Demand(MODEL, f"key-{i}", STANDARD, team_id=f"team-{i & 1}", key_limit=128, team_limit=512,
                      tokens=300, route=RouteHints(model=MODEL), capped=True) for i in range(8)]
    start = time.thread_time()
    for i in range(requests):
        demand = demands[i & 7]
        if admission.counts("POST", CHAT):  # (never, with flow control on: its caps count the request)
            admission.try_enter(demand.key_id)
        grant = await control.acquire(demand)
        grant.release(280)
    return (time.thread_time() - start) / requests


def contended(requests: int, fleet: Fleet, router: Router) -> float:
    flow = scheduler(fleet, router)
    demands = [Demand(MODEL, f"key-{i}", BANDS.all[i % 3], team_id=f"team-{i & 1}", tokens=300,
                      route=RouteHints(model=MODEL)) for i in range(8)]
    running: deque[Grant] = deque()
    waiting: deque[Waiter] = deque()
    while True:  # fill every slot, so each later request queues
        outcome = flow.offer(demands[0])
        if not isinstance(outcome, Grant):
            waiting.append(outcome)
            break
        running.append(outcome)
    start = time.thread_time()
    for i in range(requests):
        waiting.append(flow.offer(demands[i & 7]))
        running.popleft().release(280)
        while waiting and waiting[0].state != QUEUED:
            running.append(waiting.popleft().outcome)
    return (time.thread_time() - start) / requests


def cost(args: argparse.Namespace) -> dict:
    fleet, router = engines(args.engines, concurrency=10_000)
    full_fleet, full_router = engines(args.engines, concurrency=4)
    samples: dict[str, list[float]] = {"queue-less": [], "flow, no contention": [], "flow, queued": []}
    for _ in range(args.rounds):
        samples["queue-less"].append(queueless(args.requests, fleet, router))
        samples["flow, no contention"].append(asyncio.run(uncontended(args.requests, fleet, router)))
        samples["flow, queued"].append(contended(args.requests, full_fleet, full_router))
    ratios = [flow / base for flow, base in zip(samples["flow, no contention"], samples["queue-less"], strict=True)]
    return {"us_per_request": {name: round(statistics.median(values) * 1e6, 2) for name, values in samples.items()},
            "us_per_request_rounds": {name: [round(v * 1e6, 2) for v in values] for name, values in samples.items()},
            "flow_over_queueless": round(statistics.median(ratios), 2),
            "added_us": round((statistics.median(samples["flow, no contention"])
                               - statistics.median(samples["queue-less"])) * 1e6, 2)}


# --- simulation ---------------------------------------------------------------------------------

class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def simulated(slots: int, clock: Clock, **values) -> Scheduler:
    engine = Engine("http://127.0.0.1:9000")
    seen_saturated(engine, slots)
    settings = {"max_queued": 1000, "max_queued_per_key": 1000, "queue_timeout": 1e9, "aging": 10.0,
                "engine_max_waiting": 0} | values
    return Scheduler(BANDS, engines=lambda: [engine], pick=lambda demand, full: engine if engine not in full else None,
                     clock=clock, **settings)


def fairness(steps: int) -> dict:
    """Two tenants, 10:1 offered; one slot frees per step (each request 100 tokens)."""
    clock = Clock()
    flow = simulated(4, clock, max_queued=200)
    running: deque[Grant] = deque()
    waiting: list[Waiter] = []
    served = {"heavy": 0, "light": 0}
    refused = {"heavy": 0, "light": 0}

    def offer(key: str) -> None:
        try:
            outcome = flow.offer(Demand(MODEL, key, STANDARD, tokens=100))
        except QueueRefused:
            refused[key] += 1
            return
        (running.append(outcome) if isinstance(outcome, Grant) else waiting.append(outcome))

    for _ in range(steps):
        for _ in range(10):
            offer("heavy")
        offer("light")
        clock.now += 1.0
        backlogged = {w.demand.key_id for w in waiting if w.state == QUEUED}
        grant = running.popleft()
        grant.release(100)
        if backlogged >= {"heavy", "light"}:
            served[grant.demand.key_id] += 100
        for waiter in [w for w in waiting if w.state != QUEUED]:
            waiting.remove(waiter)
            if waiter.state == GRANTED:
                running.append(waiter.outcome)
            else:
                refused[waiter.demand.key_id] += 1
    heavy, light = served["heavy"], served["light"]
    return {"offered": "10:1", "tokens_served_while_both_backlogged": served,
            "ratio": round(max(heavy, light) / max(1, min(heavy, light)), 3),
            "jain_index": round((heavy + light) ** 2 / (2 * (heavy ** 2 + light ** 2)), 4), "refused": refused}


def priority(steps: int) -> dict:
    """The issue's saturation case, simulated: one request finishes every 0.1 s (4 slots); the batch band
    offers 2 per finish (2x capacity alone), interactive and standard one each per 5 finishes.
    Waits per band, from queueing to dispatch (a real engine adds its own time to first token)."""
    clock = Clock()
    flow = simulated(4, clock, aging=10.0, max_queued=400, queue_timeout=60.0)
    running: deque[Grant] = deque()
    waits: dict[str, list[float]] = {band.name: [] for band in BANDS.all}
    waiting: list[Waiter] = []
    refused = 0

    def offer(band, key: str) -> None:
        nonlocal refused
        try:
            outcome = flow.offer(Demand(MODEL, key, band))
        except QueueRefused:
            refused += 1
            return
        if isinstance(outcome, Grant):
            running.append(outcome)
            waits[band.name].append(0.0)
        else:
            waiting.append(outcome)

    for step in range(steps):
        offer(BATCH, f"batch-{step % 8}")
        offer(BATCH, f"batch-{(step + 4) % 8}")
        if step % 5 == 0:
            offer(INTERACTIVE, "interactive")
            offer(STANDARD, "standard")
        clock.now += 0.1
        flow.expire()
        if running:
            running.popleft().release(None)
        for waiter in [w for w in waiting if w.state != QUEUED]:
            waiting.remove(waiter)
            if waiter.state == GRANTED:
                running.append(waiter.outcome)
                waits[waiter.demand.band.name].append(waiter.outcome.waited)
            else:
                refused += 1
    report = {band: {"served": len(values), "p50_wait_s": round(statistics.median(values), 2) if values else None,
                     "max_wait_s": round(max(values), 2) if values else None} for band, values in waits.items()}
    report["refused"] = refused
    return report


def aging(aging_seconds: float, batch: int) -> dict:
    """An interactive request always waiting, one slot freeing per second; ``batch`` batch requests queued."""
    clock = Clock()
    flow = simulated(1, clock, aging=aging_seconds)
    running = deque([flow.offer(Demand(MODEL, "filler", INTERACTIVE))])
    watched = [flow.offer(Demand(MODEL, f"batch-{n}", BATCH)) for n in range(1, batch + 1)]
    waiting: list[Waiter] = list(watched)
    second = 0
    while any(w.state == QUEUED for w in watched) and second < 100 * batch * aging_seconds:
        second += 1
        clock.now = float(second)
        waiting.append(flow.offer(Demand(MODEL, f"i-{second}", INTERACTIVE)))
        running.popleft().release(None)
        for waiter in [w for w in waiting if w.state == GRANTED]:
            waiting.remove(waiter)
            running.append(waiter.outcome)
    waits = [w.outcome.waited for w in watched]
    bounds = [n * (aging_seconds + 1.0) for n in range(1, batch + 1)]
    return {"aging_seconds": aging_seconds, "batch_waits_s": waits, "bounds_s": bounds,
            "within_bound": all(wait <= bound for wait, bound in zip(waits, bounds, strict=True))}


# --- report -------------------------------------------------------------------------------------

def markdown(report: dict) -> str:
    cost_ = report["cost"]
    lines = ["# Flow control: the scheduler alone (bench/flow.py)", "",
             f"{report['rounds']} interleaved rounds of {report['requests']} requests, {report['engines']} engines; "
             "medians of CPU time per request (this thread).", "",
             "| path | CPU us per request |", "|---|---:|"]
    lines += [f"| {name} | {value} |" for name, value in cost_["us_per_request"].items()]
    lines += ["", f"Flow control with no contention: {cost_['flow_over_queueless']}x the queue-less path's CPU "
              f"for the same concerns, {cost_['added_us']:+} us per request.", ""]
    fair = report["fairness"]
    lines += ["## Simulation", "",
              f"Fairness, two tenants of equal weight at 10:1 offered load: tokens served while both were "
              f"backlogged {fair['tokens_served_while_both_backlogged']}, ratio {fair['ratio']}:1, "
              f"Jain's index {fair['jain_index']} (refused: {fair['refused']}).", "",
              "Priority: 4 slots, one freeing every 0.1 s; the batch band alone offers 2x capacity, interactive "
              "and standard one request each per 0.5 s (aging 10 s, queue 400, timeout 60 s):", "",
              "| band | served | p50 wait s | max wait s |", "|---|---:|---:|---:|"]
    lines += [f"| {band} | {v['served']} | {v['p50_wait_s']} | {v['max_wait_s']} |"
              for band, v in report["priority"].items() if band != "refused"]
    lines += ["", f"Refused (queue full or timed out): {report['priority']['refused']}."]
    age = report["aging"]
    lines += ["", f"Aging ({age['aging_seconds']} s), ten batch requests under an interactive flood: waits "
              f"{age['batch_waits_s']} s against bounds {age['bounds_s']} s: "
              f"{'within' if age['within_bound'] else 'BEYOND'} the bound.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--engines", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="a smoke run: few requests, short simulations")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.quick:
        args.requests, args.rounds = 500, 1
    report = {"requests": args.requests, "rounds": args.rounds, "engines": args.engines, "cost": cost(args),
              "fairness": fairness(200 if args.quick else 2000), "priority": priority(60 if args.quick else 600),
              "aging": aging(10.0, 3 if args.quick else 10)}
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "flow.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.output / "flow.md").write_text(markdown(report))
    print(markdown(report))
    return report


if __name__ == "__main__":
    main()
