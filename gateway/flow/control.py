"""Flow control as the request path uses it: ``await acquire(demand)``, then ``grant.release(tokens)``.

``acquire`` returns at once (no await, no allocation beyond the grant) when the request may go
now; otherwise it waits on a future that the scheduler settles when the request is
dispatched, refused or timed out. One timer, armed for the oldest waiter's deadline, refuses
requests that waited ``FLOW_QUEUE_TIMEOUT_SECONDS`` (arrival order is deadline order, so
the timer never needs more than one handle).

A request whose task is cancelled while it waits (its client disconnected) leaves the queue at
once and frees nothing it did not hold; cancelled just after it was granted, it releases the
grant it was given.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from gateway.config import Settings
from gateway.flow.bands import Bands
from gateway.flow.capacity import EngineView
from gateway.flow.caps import InflightCaps, OtherRequests
from gateway.flow.demand import Demand, Grant
from gateway.flow.errors import QueueRefused
from gateway.flow.queue import Waiter
from gateway.flow.scheduler import Picker, Scheduler


def bands_from_settings(settings: Settings) -> Bands:
    return Bands(settings.flow_bands, settings.flow_default_band)


class FlowControl:
    def __init__(self, scheduler: Scheduler, *, scheduling_policy: str = "fcfs") -> None:
        self.scheduler = scheduler
        # The engines' vLLM policy (ENGINE_SCHEDULING_POLICY): "priority" makes requests carry their band's.
        self.scheduling_policy = scheduling_policy
        self.bands = scheduler.bands
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None

    @classmethod
    def from_settings(cls, settings: Settings, *, engines: Callable[[], Iterable[EngineView]], pick: Picker,
                      metrics=None, others: OtherRequests | None = None) -> FlowControl:
        """``others``: the requests in flight that never queue; given, the flow holds ``MAX_INFLIGHT`` and
        ``MAX_INFLIGHT_PER_KEY`` for the requests that do (``caps``), counting both."""
        caps = InflightCaps(settings.max_inflight, settings.max_inflight_per_key, others) if others is not None \
            else None
        return cls(Scheduler(
            bands_from_settings(settings), engines=engines, pick=pick,
            max_queued=settings.flow_queue_max, max_queued_per_key=settings.flow_queue_max_per_key,
            queue_timeout=settings.flow_queue_timeout_seconds, aging=settings.flow_aging_seconds,
            engine_max_waiting=settings.flow_engine_max_waiting, metrics=metrics, caps=caps,
            headroom=settings.flow_headroom_slots,
            yield_floor=settings.flow_yield_floor if settings.flow_yield else None),
            scheduling_policy=settings.engine_scheduling_policy)

    async def acquire(self, demand: Demand) -> Grant:
        """Leave to send ``demand``'s request (release it when the request ends); ``QueueRefused`` if not."""
        outcome = self.scheduler.offer(demand)
        if isinstance(outcome, Grant):
            return outcome
        return await self._wait(outcome)

    def capacity_changed(self) -> None:
        """Call after each scrape of the engines and each look at them (``EngineState.on_change``):
        slots may have freed, engines may have left."""
        self.scheduler.engines_changed()

    def close(self) -> None:
        """The gateway is stopping: every waiting request is refused now (503), the timer stops."""
        self.scheduler.refuse_all("the gateway is shutting down")
        if self._timer is not None:
            self._timer.cancel()
            self._timer = self._timer_at = None

    async def _wait(self, waiter: Waiter) -> Grant:
        if waiter.outcome is None:  # not dispatched by the call that queued it
            waiter.future = asyncio.get_running_loop().create_future()
            self._arm()
            try:
                await waiter.future
            except asyncio.CancelledError:
                if isinstance(waiter.outcome, Grant):  # granted, then cancelled before it resumed
                    waiter.outcome.release(0)
                elif isinstance(waiter.outcome, QueueRefused):
                    waiter.future.exception()  # settled before it resumed: retrieved, nobody to tell
                else:
                    self.scheduler.cancel(waiter)
                raise
        if isinstance(waiter.outcome, QueueRefused):
            raise waiter.outcome
        return waiter.outcome

    def _arm(self) -> None:
        deadline = self.scheduler.next_deadline()
        if deadline is None or (self._timer_at is not None and self._timer_at <= deadline):
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = deadline
        delay = max(0.0, deadline - self.scheduler.clock())
        self._timer = asyncio.get_running_loop().call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = self._timer_at = None
        self.scheduler.expire()
        self._arm()
