"""The scheduler: who goes next, and when (synchronous, driven by events; ``control`` adds the waiting).

A request is granted at once when its model has nothing queued, its key and team are below
their concurrency limits and an engine serving its model has a free slot (``capacity``); the
engine is picked then (``pick``, the router), among the engines that are not saturated.
Otherwise it queues, and is dispatched by the next event that frees what it needs: a
release (its slot, its key's and team's), a scrape or an engine coming back
(``capacity_changed``). Nothing polls.

The lowest band has less room on an engine than the others: the headroom once the engine was
seen saturated (``capacity``), and while a higher band is active there at most
``FLOW_YIELD_FLOOR`` of its requests (``yielding``).

Order when a slot frees (per model):

A key at its ``max_concurrency`` or at ``MAX_INFLIGHT_PER_KEY``, a team at its
``max_concurrency`` and the gateway at ``MAX_INFLIGHT`` (``caps``) hold a request back the
same way an engine without a free slot does: it waits, and goes when one of those ends.

1. **Aging**: a band below the highest that has waited ``aging`` seconds since it was last
   served (or since it began to wait) goes first. So while higher bands keep every slot
   busy, each lower band with a request that may go is still served at least once every
   ``FLOW_AGING_SECONDS`` (at the first slot that frees after that): its next request waits at
   most that long plus one slot, and its n-th at most n times that. A band's own backlog never
   ages it ahead of a higher band: the clock restarts whenever the band is served.
2. **Priority**: otherwise the highest band with a request that may go.
3. **Fairness** within the band: the tenant with the lowest virtual token counter, its oldest
   request among its keys below their limit (``queue``, ``fairness``).

Bounds: ``max_queued`` waiting per model (full: a request of a higher band takes the place of
the newest of the lowest band below it (503 to that one); else, in its band, of the newest of
the tenant with the most waiting (429: its own excess); else it is refused, 503),
``max_queued_per_key`` waiting per key (429), ``queue_timeout`` seconds of waiting (429 when
the key or team was at its own limit then, else 503: saturated engines, or the gateway at
``MAX_INFLIGHT``). Everything runs on one event loop and
never awaits: no locks.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable
from typing import Any

from gateway.flow import errors
from gateway.flow.bands import Bands
from gateway.flow.capacity import EngineSlots, EngineView
from gateway.flow.caps import InflightCaps
from gateway.flow.demand import Demand, Grant
from gateway.flow.errors import QueueRefused
from gateway.flow.queue import CANCELLED, GRANTED, QUEUED, REFUSED, BandQueue, ModelQueue, Waiter
from gateway.flow.yielding import lowest_band_room

Picker = Callable[[Demand, Collection[Any]], Any]
RETRY_AFTER_MAX = 60


class Scheduler:
    def __init__(self, bands: Bands, *, engines: Callable[[], Iterable[EngineView]], pick: Picker,
                 max_queued: int, max_queued_per_key: int, queue_timeout: float, aging: float,
                 engine_max_waiting: int, clock: Callable[[], float] = time.monotonic, metrics=None,
                 caps: InflightCaps | None = None, headroom: int = 0, yield_floor: int | None = None) -> None:
        self.bands = bands
        self.caps = caps if caps is not None else InflightCaps()
        self.max_queued = max_queued
        self.max_queued_per_key = max_queued_per_key
        self.queue_timeout = queue_timeout
        self.aging = aging
        self.engine_max_waiting = engine_max_waiting
        # The lowest band's reserve (capacity.py): kept only when there is a band above it.
        self.headroom = headroom if len(bands.all) > 1 else 0
        # The lowest band's grants per engine while a higher band is active there (yielding.py; None: off).
        self.yield_floor = yield_floor if len(bands.all) > 1 else None
        self._lowest_limited = bool(self.headroom) or self.yield_floor is not None
        self._lowest_rank = len(bands.all) - 1
        self.clock = clock
        self._engines = engines
        self._pick = pick
        self._metrics = metrics
        self._queues: dict[str, ModelQueue] = {}
        self._slots: dict[Any, EngineSlots] = {}
        self._held_keys: dict[str, int] = {}
        self._held_teams: dict[str, int] = {}
        self._queued_keys: dict[str, int] = {}
        self._deadlines: OrderedDict[int, Waiter] = OrderedDict()  # arrival order is deadline order
        self._seq = 0

    # --- what the request path calls -------------------------------------------------------
    def offer(self, demand: Demand) -> Grant | Waiter:
        """A grant now, or the request's place in the queue; ``QueueRefused`` when it may not queue.

        The waiter returned may already be settled (dispatched by the same call).
        """
        now = self.clock()
        queue = self._queues.get(demand.model) or self._queue(demand.model)
        if not queue.size and not self._held_back(demand) and not self._team_blocked(demand):
            room, full, routable = self._room(queue, now, self._is_lowest(demand))
            if not routable:
                return self._grant(queue, demand, None, 0.0, now)
            if room > 0:
                engine = self._pick(demand, full)
                if engine is not None:
                    return self._grant(queue, demand, engine, 0.0, now)
        return self._enqueue(queue, demand, now)

    def release(self, grant: Grant, tokens: int | None) -> None:
        """``grant``'s request ended (``Grant.release`` calls this once); its slots go to waiters."""
        demand = grant.demand
        if demand.capped:
            self.caps.leave(demand.key_id)
        _decrement(self._held_keys, demand.key_id)
        if demand.team_id is not None:
            _decrement(self._held_teams, demand.team_id)
        if grant.engine is not None:
            self._engine_slots(grant.engine).count(self._is_lowest(demand), -1)
        fairness = self._queues[demand.model].bands[demand.band.rank].fairness
        if tokens is not None:
            fairness.correct(demand.tenant, tokens - demand.tokens, demand.weight)
        fairness.leave(demand.tenant)
        self.capacity_changed()

    def moved(self, grant: Grant, engine: Any) -> None:
        lowest = self._is_lowest(grant.demand)
        if grant.engine is not None:
            self._engine_slots(grant.engine).count(lowest, -1)
        if engine is not None:
            self._engine_slots(engine).count(lowest, 1)

    def cancel(self, waiter: Waiter) -> None:
        """The client left while ``waiter`` was queued: out of the queue now; it held nothing."""
        if waiter.state == QUEUED:
            self._leave_queue(waiter, CANCELLED, None, errors.CANCELLED)

    def capacity_changed(self) -> None:
        """Slots may have freed (a release, a scrape, an engine back, a request that never queues
        ended): dispatch what can go."""
        if not self._deadlines:  # nothing waits (the usual case: a cheap no-op)
            return
        now = self.clock()
        for queue in self._queues.values():
            if queue.size:
                self._dispatch(queue, now)

    def expire(self) -> int:
        """Refuse the requests that waited ``queue_timeout``; returns how many."""
        now = self.clock()
        expired = 0
        while self._deadlines:
            waiter = next(iter(self._deadlines.values()))
            if waiter.deadline > now:
                break
            demand = waiter.demand
            own = self._key_blocked(demand) or self._team_blocked(demand)
            if own:
                whose = "its API key's (or team's) requests in flight stayed at their limit"
            elif demand.capped and self.caps.full():
                whose = f"the gateway stayed at its limit of {self.caps.max_inflight} requests in flight"
            else:
                whose = f"the engines serving '{demand.model}' stayed saturated"
            refusal = self._refusal(errors.TIMEOUT, f"waited {self.queue_timeout:g}s in the queue and {whose}",
                                    own, self._queues[demand.model])
            self._leave_queue(waiter, REFUSED, refusal, errors.TIMEOUT)
            expired += 1
        return expired

    def refuse_all(self, message: str) -> int:
        """Refuse every queued request now (503; the gateway is stopping); returns how many."""
        refused = 0
        while self._deadlines:
            waiter = next(iter(self._deadlines.values()))
            queue = self._queues[waiter.demand.model]
            self._leave_queue(waiter, REFUSED, self._refusal(errors.SHUTDOWN, message, False, queue), errors.SHUTDOWN)
            refused += 1
        return refused

    def next_deadline(self) -> float | None:
        """When the oldest queued request times out (clock time), None when nothing waits."""
        return next(iter(self._deadlines.values())).deadline if self._deadlines else None

    def queued(self, model: str | None = None) -> int:
        if model is None:
            return len(self._deadlines)
        queue = self._queues.get(model)
        return queue.size if queue is not None else 0

    def tracked(self) -> list:
        """The engines the scheduler keeps bookkeeping for."""
        return list(self._slots)

    def engines_changed(self) -> None:
        """The fleet changed: forget the bookkeeping of engines that left with nothing held there."""
        present = {id(engine) for engine in self._engines()}
        for engine in [engine for engine, slots in self._slots.items() if id(engine) not in present and not slots.held]:
            del self._slots[engine]
        self.capacity_changed()

    # --- inside ------------------------------------------------------------------------------
    def _queue(self, model: str) -> ModelQueue:
        queue = self._queues[model] = ModelQueue(model, self.bands, self._metrics)
        return queue

    def _engine_slots(self, engine: Any) -> EngineSlots:
        slots = self._slots.get(engine)
        if slots is None:
            slots = self._slots[engine] = EngineSlots()
        return slots

    def _key_blocked(self, demand: Demand) -> bool:
        """The request's key is at its own limit: its ``max_concurrency``, or ``MAX_INFLIGHT_PER_KEY``."""
        limit = demand.key_limit
        if limit is not None and self._held_keys.get(demand.key_id, 0) >= limit:
            return True
        return demand.capped and self.caps.key_full(demand.key_id)

    def _held_back(self, demand: Demand) -> bool:
        """The request may not go whatever the engines' slots: its key's limits, or the gateway's ``MAX_INFLIGHT``."""
        return self._key_blocked(demand) or (demand.capped and self.caps.full())

    def _team_blocked(self, demand: Demand) -> bool:
        limit = demand.team_limit
        return limit is not None and demand.team_id is not None and self._held_teams.get(demand.team_id, 0) >= limit

    def _is_lowest(self, demand: Demand) -> bool:
        return demand.band.rank == self._lowest_rank

    def _room(self, queue: ModelQueue, now: float, lowest: bool = False) -> tuple[float, list, bool]:
        """Free slots for the queue's model, its saturated engines, and whether any engine serving it is
        routable (``lowest``: for a request of the lowest band: the headroom, capacity.py, and the yield to
        the higher bands, yielding.py)."""
        model = queue.model
        room = 0.0
        full: list = []
        routable = False
        reserve = self.headroom if lowest else 0
        higher_waiting = lowest and any(band.size for band in queue.bands[:self._lowest_rank])
        for engine in self._engines():
            if model not in engine.models or not engine.routable(now):
                continue
            routable = True
            slots = self._engine_slots(engine)
            free = slots.free(engine, self.engine_max_waiting, reserve)
            if lowest:
                free = min(free, lowest_band_room(floor=self.yield_floor, lowest_held=slots.lowest,
                                                  higher_held=slots.higher, higher_waiting=higher_waiting))
            if free > 0:
                room += free
            else:
                full.append(engine)
        return room, full, routable

    def _enqueue(self, queue: ModelQueue, demand: Demand, now: float) -> Waiter:
        band = queue.bands[demand.band.rank]
        metrics = queue.metrics[demand.band.rank]
        if self._queued_keys.get(demand.key_id, 0) >= self.max_queued_per_key:
            metrics.dropped(errors.KEY_QUEUE_FULL)
            raise self._refusal(errors.KEY_QUEUE_FULL, f"this API key already has {self.max_queued_per_key} "
                                "requests waiting in the queue", True, queue)
        if queue.size >= self.max_queued:
            victim, own = self._displaceable(queue, demand)
            if victim is None:
                metrics.dropped(errors.QUEUE_FULL)
                raise self._refusal(errors.QUEUE_FULL, f"the queue for '{demand.model}' is full "
                                    f"({self.max_queued} requests waiting)", False, queue)
            whose = "its team's or key's many waiting requests gave way to a tenant with fewer" if own else \
                "a request of a higher band took its place"
            refusal = self._refusal(errors.DISPLACED, f"the queue for '{demand.model}' is full and {whose}", own,
                                    queue)
            self._leave_queue(victim, REFUSED, refusal, errors.DISPLACED)
        self._seq += 1
        waiter = Waiter(demand, self._seq, now, now + self.queue_timeout)
        band.push(waiter, now)
        queue.size += 1
        self._deadlines[waiter.seq] = waiter
        self._queued_keys[demand.key_id] = self._queued_keys.get(demand.key_id, 0) + 1
        metrics.length.set(band.size)
        self._dispatch(queue, now)  # slots may be free while every other waiter is at its own limit
        return waiter

    def _displaceable(self, queue: ModelQueue, demand: Demand) -> tuple[Waiter | None, bool]:
        """Who gives way to ``demand`` in a full queue, and whether for its own excess.

        The newest request of the lowest band below ``demand``'s; else, in its own band, the
        newest of the tenant with the most requests waiting, when that tenant has more than one
        more than ``demand``'s (a flood from one tenant cannot lock the others out of the queue).
        """
        for lower in reversed(queue.bands[demand.band.rank + 1:]):
            if lower.size:
                return lower.newest(), False
        band = queue.bands[demand.band.rank]
        largest = band.largest()
        if largest is None or largest.tenant == demand.tenant:
            return None, False
        mine = band.tenants.get(demand.tenant)
        if largest.size <= (mine.size if mine is not None else 0) + 1:
            return None, False
        return band.newest(largest), True

    def _leave_queue(self, waiter: Waiter, state: str, outcome: Grant | QueueRefused | None, reason: str | None,
                     now: float | None = None) -> None:
        demand = waiter.demand
        queue = self._queues[demand.model]
        band = queue.bands[demand.band.rank]
        band.remove(waiter)
        queue.size -= 1
        del self._deadlines[waiter.seq]
        _decrement(self._queued_keys, demand.key_id)
        metrics = queue.metrics[demand.band.rank]
        metrics.length.set(band.size)
        if reason is not None:
            band.fairness.leave(demand.tenant)
            metrics.dropped(reason)
        waiter.settle(state, outcome)

    def _dispatch(self, queue: ModelQueue, now: float) -> None:
        while queue.size:
            room, full, routable = self._room(queue, now)
            if routable and room <= 0:
                return
            lowest_full, lowest_may_go = full, True
            if self._lowest_limited and queue.bands[self._lowest_rank].size:
                lowest_room, lowest_full, _ = self._room(queue, now, lowest=True)
                lowest_may_go = not routable or lowest_room > 0
            waiter = self._select(queue, now, lowest_may_go)
            if waiter is None:
                return
            engine = None
            if routable:
                engine = self._pick(waiter.demand, lowest_full if self._is_lowest(waiter.demand) else full)
                if engine is None:
                    return
            waited = now - waiter.enqueued_at
            grant = self._grant(queue, waiter.demand, engine, waited, now, queued=True)
            self._leave_queue(waiter, GRANTED, grant, None)

    def _select(self, queue: ModelQueue, now: float, lowest_may_go: bool = True) -> Waiter | None:
        """The next waiter to go; ``lowest_may_go`` False: none of the lowest band (no room left for it)."""
        key_blocked, team_blocked = self._held_back, self._team_blocked
        starving: BandQueue | None = None
        choice: Waiter | None = None
        bands = queue.bands if lowest_may_go else queue.bands[:self._lowest_rank]
        for band in bands[1:]:  # the highest band is never kept waiting by another
            if band.size and now - band.since >= self.aging and (starving is None or band.since < starving.since):
                waiter = band.next(key_blocked, team_blocked)
                if waiter is not None:
                    starving, choice = band, waiter
        if choice is not None:
            return choice
        for band in bands:
            if band.size:
                waiter = band.next(key_blocked, team_blocked)
                if waiter is not None:
                    return waiter
        return None

    def _grant(self, queue: ModelQueue, demand: Demand, engine: Any, waited: float, now: float, *,
               queued: bool = False) -> Grant:
        if demand.capped:
            self.caps.enter(demand.key_id)
        self._held_keys[demand.key_id] = self._held_keys.get(demand.key_id, 0) + 1
        if demand.team_id is not None:
            self._held_teams[demand.team_id] = self._held_teams.get(demand.team_id, 0) + 1
        if engine is not None:
            self._engine_slots(engine).count(self._is_lowest(demand), 1)
        band = queue.bands[demand.band.rank]
        if not queued:
            band.fairness.join(demand.tenant, backlogged=False)
        band.fairness.served(demand.tenant, demand.tokens, demand.weight)
        band.since = now
        queue.metrics[demand.band.rank].wait(waited)
        if queued:
            queue.waited(waited)
        return Grant(self, demand, engine, waited)

    def _refusal(self, reason: str, message: str, own: bool, queue: ModelQueue) -> QueueRefused:
        retry_after = 1 if own else min(RETRY_AFTER_MAX, max(1, math.ceil(queue.typical_wait)))
        return QueueRefused(reason, message, own_limit=own, retry_after=retry_after)


def _decrement(counts: dict[str, int], key: str) -> None:
    left = counts.get(key, 0) - 1
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)
