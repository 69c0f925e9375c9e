"""The one adapter between batch lines and flow control: a line waits for its turn in the ``batch`` band.

A line asks ``BatchLane.enter`` for leave to go to an engine, as a live request asks flow
control (``gateway.flow``): a ``Demand`` of the lowest band (``batch`` by default, the last
of ``FLOW_BANDS``), for the batch owner's key, of the line's estimated tokens. The scheduler
grants it while an engine has a free slot, and holds it while the engines are saturated
(their learned concurrency, their live requests: the interactive ones included), so batch
lines fill idle capacity instead of queueing inside the engine ahead of interactive traffic.
The engine is also told the band's priority when the engines run the priority scheduler
(``ENGINE_SCHEDULING_POLICY``): vLLM's ``X-Vllm-Priority`` header, as live requests carry it.

Where the ``FlowControl`` comes from is decided here and nowhere else (``BatchLane.for_core``): the
request path's (``core.relay.flow``), so lines and live requests wait in one queue; with
``FLOW_CONTROL`` off, a scheduler of the batch lines' own, over the same fleet and router. A refusal by the queue
(its timeout, a full queue) is not the line's result: the line waits again, so a batch only
ever slows down under interactive load, it never fails because of it.

While interactive (any higher band's) requests run on an engine, the scheduler holds the batch
band there to ``FLOW_YIELD_FLOOR`` lines (``gateway.flow.yielding``): the rest of the lane's lines
wait in the queue here and go as soon as the interactive traffic is gone.

A line waiting here is the batch's to stop: its ``stop`` (a cancel, the window's end) takes it out
of the queue at once (``LineStopped``), as it ends a wait for a rate limit (``executor``); a grant
given in the same instant is given back, so a stopped line never reaches the engine.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from gateway.batches.model import LineStopped
from gateway.config import Settings
from gateway.core import Core
from gateway.engines.routing import RouteHints
from gateway.flow.bands import Band, engine_priority, engine_priority_header
from gateway.flow.control import FlowControl
from gateway.flow.demand import Demand, Grant, estimated_tokens
from gateway.flow.errors import QueueRefused

BATCH_BAND = "batch"
REFUSED_PAUSE_SECONDS = 1.0  # after a queue refusal, a line asks again this much later (x its retry_after)


def batch_band(flow: FlowControl) -> Band:
    """The ``batch`` band when it is configured, else the lowest one."""
    return flow.bands.get(BATCH_BAND) or flow.bands.lowest


class BatchLane:
    def __init__(self, flow: FlowControl, settings: Settings, *, owned: bool = False,
                 pause: Callable[[float], object] = asyncio.sleep) -> None:
        self.flow = flow
        self.owned = owned  # a scheduler of the lines' own (closed with them), not the core's
        self.band = batch_band(flow)
        self.engine_priority = engine_priority(self.band, settings.engine_scheduling_policy)
        self.priority_header = engine_priority_header(self.band, settings.engine_scheduling_policy)
        self._pause = pause
        self.refusals = 0  # queue refusals waited out (for /health and the tests)

    @classmethod
    def for_core(cls, core: Core) -> BatchLane:
        """Through the core's flow control when it has one, else through one over the same engines."""
        shared = core.relay.flow  # the request path's (None with FLOW_CONTROL off)
        if isinstance(shared, FlowControl):
            return cls(shared, core.settings)
        router = core.engines.router
        flow = FlowControl.from_settings(core.settings, engines=lambda: core.engines.fleet.engines,
                                         pick=lambda demand, exclude: router.pick(demand.route, exclude))
        core.engine_state.on_change(flow.capacity_changed)
        return cls(flow, core.settings, owned=True)

    async def enter(self, *, model: str, owner: str, body_bytes: int, max_tokens: object,
                    route: RouteHints | None, stop: asyncio.Event | None = None) -> Grant:
        """Leave to send one line (release it with the tokens served when the line ends);
        ``LineStopped`` as soon as ``stop`` is set (the batch was cancelled or expired)."""
        demand = Demand(model=model, key_id=owner, band=self.band, tokens=estimated_tokens(body_bytes, max_tokens),
                        route=route)
        while True:
            try:
                return await self._until_stopped(self.flow.acquire(demand), stop)
            except QueueRefused as refused:  # (a stopping gateway cancels the line's task meanwhile)
                self.refusals += 1
                await self._until_stopped(self._pause(REFUSED_PAUSE_SECONDS * max(1, min(refused.retry_after, 10))),
                                          stop)

    @staticmethod
    async def _until_stopped(awaitable, stop: asyncio.Event | None):
        """``awaitable``'s result, unless ``stop`` is set first: then it is cancelled (a queued wait leaves
        the queue; a grant it got meanwhile is released) and ``LineStopped`` raised."""
        if stop is None:
            return await awaitable
        if stop.is_set():
            if asyncio.iscoroutine(awaitable):
                awaitable.close()  # never started
            raise LineStopped
        work = asyncio.ensure_future(awaitable)
        stopping = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait((work, stopping), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # the line's own task (a stopping gateway): nothing kept
            await _ended(work, stopping)
            _give_back(work)
            raise
        await _ended(work, stopping)
        if not stop.is_set():
            return work.result()  # a grant, the end of a pause, or the queue's refusal
        _give_back(work)
        raise LineStopped

    def close(self) -> None:
        """The gateway stops: a scheduler of the lines' own refuses its waiters (a shared one is its owner's)."""
        if self.owned:
            self.flow.close()


async def _ended(work: asyncio.Future, stopping: asyncio.Future) -> None:
    """Both done: the one still waiting is cancelled, and awaited so that a queued wait has left the queue."""
    stopping.cancel()
    work.cancel()  # (nothing when it is done)
    await asyncio.wait((work, stopping))


def _give_back(work: asyncio.Future) -> None:
    """A grant given in the same instant as the stop (or the cancel): released unused (the line never goes);
    a refusal given then is dropped (retrieved, nobody to tell)."""
    if not work.cancelled() and work.exception() is None and isinstance(work.result(), Grant):
        work.result().release(0)
