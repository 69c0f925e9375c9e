"""On the real engine: a batch keeps ``FLOW_YIELD_FLOOR`` lines at the engine while an interactive stream runs.

The count is the gateway's own (flow control's grants of the batch band on the engine), seen at
every grant and release, not sampled; the batch is also seen to progress at the floor, and to
take all of ``BATCH_CONCURRENCY`` again once the stream has ended.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from gateway.flow.capacity import EngineSlots
from tests.gateway.batches.conftest import jobs_ready
from tests.gateway.batches.test_batches_engine import check_output, finished, progress, submit
from tests.support.engine_gateway import engine_settings
from tests.support.gateway import READ_KEY, running_gateway

FLOOR = 1
CONCURRENCY = 6


class Peaks:
    """The most batch-band grants the flow held on any engine, per phase of the test."""

    def __init__(self) -> None:
        self.phase = "before"
        self.peak: dict[str, int] = {}

    def watch(self, monkeypatch) -> None:
        count = EngineSlots.count

        def counted(slots: EngineSlots, lowest: bool, step: int) -> None:
            count(slots, lowest, step)
            self.peak[self.phase] = max(self.peak.get(self.phase, 0), slots.lowest)

        monkeypatch.setattr(EngineSlots, "count", counted)


@pytest.mark.integration
async def test_a_batch_keeps_the_floor_at_the_engine_while_an_interactive_stream_runs(idle_vllm_engine, tmp_path,
                                                                                         monkeypatch):
    engine = idle_vllm_engine
    peaks = Peaks()
    peaks.watch(monkeypatch)
    settings = engine_settings(engine, tmp_path, batch_poll_seconds=0.2, batch_concurrency=CONCURRENCY,
                               flow_yield_floor=FLOOR)
    chat = {"model": engine.model, "messages": [{"role": "user", "content": "Tell a very long story."}],
            "max_tokens": 30000, "temperature": 0, "ignore_eos": True, "stream": True}
    async with running_gateway(settings) as (base_url, _), \
            httpx.AsyncClient(headers={"authorization": f"Bearer {READ_KEY}"}, timeout=300) as client:
        await jobs_ready(base_url)
        async with client.stream("POST", f"{base_url}/v1/chat/completions", json=chat) as stream:
            assert stream.status_code == 200
            events = stream.aiter_lines()
            async with asyncio.timeout(120):  # a hang guard: the stream's first token
                while '"content"' not in await anext(events):
                    pass
            peaks.phase = "during"
            batch_id = await submit(base_url, engine, 4 * CONCURRENCY, 16)
            await progress(base_url, batch_id, 3, 300)  # it progresses beside the stream, at the floor
            peaks.phase = "after"
        # The stream closed (its engine request aborted, its grant released): the lane grows back.
        batch, output = await finished(base_url, batch_id, 300)
    assert batch.request_counts.completed == 4 * CONCURRENCY
    check_output(output, 4 * CONCURRENCY, 16)
    assert peaks.peak["during"] == FLOOR
    assert peaks.peak["after"] > FLOOR  # (6 lines at once when nothing else runs; the engine is not saturated)
