"""The lowest band yields to live traffic: while a higher band is busy, it keeps a few requests per engine.

The headroom (``capacity``) only holds the lowest band back on an engine seen saturated. A
CPU engine is rarely saturated by the batch lane (it runs dozens at once): there the lowest
band kept every one of its lines (``BATCH_CONCURRENCY``) in the engine, and a higher band's
requests shared a decode batch that many lines fuller. Measured on the embedded model (4
interactive streams beside a 32-line batch, engines on ``fcfs``): interactive TTFT p50 1.49x
the same load without the batch (docs/benchmarks.md, batches).

So, per engine, the lowest band's grants are held to ``FLOW_YIELD_FLOOR`` while the higher
bands are **active** there: a grant of a higher band held on that engine, or a request of a
higher band waiting in the gateway's queue for the model (it has no engine yet; any engine
may get it). Back to its normal room (the headroom rule, or none) the moment neither holds:
the release of the last higher-band grant dispatches the waiting lines at once, nothing
polls. The floor (at least 1) keeps a batch progressing beside steady interactive traffic.

This is llm-d's "sheddable" band treated gently: its endpoint picker (the Gateway API Inference
Extension) rejects requests of a negative priority once the whole pool is saturated and treats
them like any other below that; vLLM's priority scheduler orders waiting requests but never
preempts a running one for a better priority (only under KV pressure).
Neither keeps a low band's running share small while an idle engine serves higher traffic,
which is what a fuller decode batch on a CPU engine costs. Lines already running when
interactive traffic arrives finish (vLLM does not preempt them); the yield only stops new
ones from starting.

The counts are the flow's own grants (``EngineSlots.lowest``/``higher``), so the rule applies to
live requests of the lowest band too (``x-priority: batch``, ``service_tier: flex``), and it is
not seen by the lane's own scheduler under ``FLOW_CONTROL=false`` (live requests never reach it).
"""

from __future__ import annotations

import math


def lowest_band_room(*, floor: int | None, lowest_held: int, higher_held: int, higher_waiting: bool) -> float:
    """How many more requests of the lowest band an engine may take under the yield rule
    (``inf``: the rule does not limit it; ``floor`` None: the rule is off)."""
    if floor is None or (higher_held <= 0 and not higher_waiting):
        return math.inf
    return floor - lowest_held
