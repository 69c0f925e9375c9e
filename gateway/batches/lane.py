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
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

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
                    route: RouteHints | None) -> Grant:
        """Leave to send one line (release it with the tokens served when the line ends)."""
        demand = Demand(model=model, key_id=owner, band=self.band, tokens=estimated_tokens(body_bytes, max_tokens),
                        route=route)
        while True:
            try:
                return await self.flow.acquire(demand)
            except QueueRefused as refused:  # (a stopping gateway cancels the line's task meanwhile)
                self.refusals += 1
                await self._pause(REFUSED_PAUSE_SECONDS * max(1, min(refused.retry_after, 10)))

    def close(self) -> None:
        """The gateway stops: a scheduler of the lines' own refuses its waiters (a shared one is its owner's)."""
        if self.owned:
            self.flow.close()
