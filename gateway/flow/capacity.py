"""How many more requests each engine should be given now: its free slots.

An engine runs up to some number of requests at once (vLLM's ``--max-num-seqs``, or fewer
when its KV cache is full); beyond that, requests wait inside it, in an order the gateway no
longer controls (llm-d calls that "scheduling regret"). So the gateway holds requests itself
once an engine has ``FLOW_ENGINE_MAX_WAITING`` waiting inside; a few may wait there, so the
engine never idles between a request ending and the next arriving.

Per engine, from what ``gateway.engines`` already knows:

- its **concurrency** (how many it runs at once) is learned from its ``/metrics``
  (``engines.scrape``): a scrape that shows requests waiting says it runs all it can, so its
  concurrency is the ``running`` count then; a scrape with none waiting says it could run at
  least one more than it did (the estimate only grows then, one step per scrape). Until an
  engine was first seen with requests waiting, its concurrency is unknown and it is never
  held back (vLLM queues the surplus, the next scrape reveals it);
- its **load from elsewhere** (other gateway replicas, direct clients) is what the last scrape
  counted beyond this gateway's own requests then (``running + waiting - own``);
- **this gateway's own load** is counted live: the requests granted to the engine and not
  yet released, or the requests it has open there (``Engine.inflight``, which also counts
  requests that do not queue), whichever is more. A release frees its slot at once; no
  polling waits for the next scrape.

free = concurrency + FLOW_ENGINE_MAX_WAITING - load from elsewhere - own load

For the lowest band the engine has less room (``reserve``): it never waits inside an engine,
and it leaves ``FLOW_HEADROOM_SLOTS`` of the running slots to the higher bands (never the last
one: a band always keeps one slot), so a higher band's request finds a slot at once instead of
waiting for a long low-band generation to end (vLLM does not preempt a running request):

free = concurrency - min(FLOW_HEADROOM_SLOTS, concurrency - 1) - load from elsewhere - own load

An engine without a scrape (``ENGINE_METRICS_INTERVAL=0``, or a scrape that failed) keeps its
learned concurrency and counts no load from elsewhere.
"""

from __future__ import annotations

import math
from typing import Protocol


class LoadView(Protocol):
    running: float
    waiting: float


class EngineView(Protocol):
    """What the flow reads of an engine (``gateway.engines.engine.Engine`` is one)."""

    models: list[str]
    load: LoadView | None
    inflight: int
    inflight_at_scrape: int
    scraped_at: float

    def routable(self, now: float) -> bool: ...


class EngineSlots:
    """The flow's own bookkeeping for one engine."""

    __slots__ = ("lowest", "higher", "concurrency", "seen_scrape")

    def __init__(self) -> None:
        self.lowest = 0                      # grants on this engine not yet released: the lowest band's (yielding.py)
        self.higher = 0                      # and the other bands'
        self.concurrency: int | None = None  # learned; None: never seen saturated
        self.seen_scrape = -1.0

    @property
    def held(self) -> int:
        """Grants on this engine not yet released, of every band."""
        return self.lowest + self.higher

    def count(self, lowest: bool, step: int) -> None:
        """A grant of the lowest band (or of a higher one) came (``step`` 1) or went (-1)."""
        if lowest:
            self.lowest += step
        else:
            self.higher += step

    def learn(self, engine: EngineView) -> None:
        """Fold in the engine's latest scrape, once per scrape."""
        if engine.scraped_at == self.seen_scrape:
            return
        self.seen_scrape = engine.scraped_at
        load = engine.load
        if load is None:
            return
        running = int(load.running)
        if load.waiting > 0:
            self.concurrency = max(1, running)
        elif self.concurrency is not None and running >= self.concurrency:
            self.concurrency = running + 1

    def free(self, engine: EngineView, max_waiting: int, reserve: int = 0) -> float:
        """How many more requests ``engine`` should get now (``inf`` when it is not held back);
        ``reserve``: running slots kept for others (the lowest band's call: it gets no waiting room)."""
        self.learn(engine)
        if self.concurrency is None:
            return math.inf
        if reserve:
            max_waiting = -min(reserve, self.concurrency - 1)
        held = self.lowest + self.higher
        own = held if held > engine.inflight else engine.inflight
        load = engine.load
        elsewhere = 0.0
        if load is not None:
            elsewhere = load.running + load.waiting - engine.inflight_at_scrape
            if elsewhere < 0:
                elsewhere = 0.0
        return self.concurrency + max_waiting - elsewhere - own
