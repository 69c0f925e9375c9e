"""Engines, a clock and a scheduler for driving flow control by hand: explicit events, no sleeps."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.flow.bands import Bands
from gateway.flow.demand import Demand, Grant
from gateway.flow.queue import GRANTED, QUEUED, Waiter
from gateway.flow.scheduler import Scheduler

MODEL = "qwen3-embedded"
BANDS = Bands(["interactive", "standard", "batch"], "standard")
INTERACTIVE, STANDARD, BATCH = BANDS.all


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Load:
    running: float = 0.0
    waiting: float = 0.0


@dataclass(eq=False)
class FakeEngine:
    """What flow control reads of an engine (``capacity.EngineView``)."""

    name: str = "engine-0"
    models: list[str] = field(default_factory=lambda: [MODEL])
    load: Load | None = None
    inflight: int = 0
    inflight_at_scrape: int = 0
    scraped_at: float = 0.0
    ready: bool = True

    def routable(self, now: float) -> bool:
        return self.ready

    def scrape(self, running: float, waiting: float, *, own: int | None = None) -> None:
        """A new /metrics reading (``own``: this gateway's requests open there at that moment)."""
        self.load = Load(running, waiting)
        self.inflight_at_scrape = self.inflight if own is None else own
        self.scraped_at += 1.0


def saturated_engine(concurrency: int, **values) -> FakeEngine:
    """An engine already seen running ``concurrency`` requests with more waiting (all of them this gateway's)."""
    engine = FakeEngine(**values)
    engine.scrape(concurrency, 1, own=concurrency + 1)
    return engine


class Picks:
    """The engine picker: the first engine not excluded (the router's place); records each call."""

    def __init__(self, engines: list[FakeEngine]) -> None:
        self.engines = engines
        self.calls: list[tuple[Demand, list]] = []

    def __call__(self, demand: Demand, exclude) -> FakeEngine | None:
        self.calls.append((demand, list(exclude)))
        return next((engine for engine in self.engines if engine not in exclude and demand.model in engine.models),
                    None)


def make_scheduler(engines: list[FakeEngine], clock: Clock | None = None, *, metrics=None, **values) -> Scheduler:
    settings = {"max_queued": 1000, "max_queued_per_key": 1000, "queue_timeout": 30.0, "aging": 10.0,
                "engine_max_waiting": 0} | values
    return Scheduler(BANDS, engines=lambda: engines, pick=Picks(engines), clock=clock or Clock(), metrics=metrics,
                     **settings)


def demand(key: str = "k1", band=STANDARD, *, team: str | None = None, tokens: int = 100, **values) -> Demand:
    return Demand(model=values.pop("model", MODEL), key_id=key, band=band, team_id=team, tokens=tokens, **values)


def granted(outcome) -> Grant:
    """What ``Scheduler.offer`` gave, asserted to be a grant (at once, or a waiter granted since)."""
    if isinstance(outcome, Waiter):
        assert outcome.state == GRANTED, outcome
        return outcome.outcome
    assert isinstance(outcome, Grant), outcome
    return outcome


def queued(outcome) -> Waiter:
    """What ``Scheduler.offer`` gave, asserted to be a waiter still in the queue."""
    assert isinstance(outcome, Waiter) and outcome.state == QUEUED, outcome
    return outcome
