"""A slow, stuck or dead collector never fails or holds up a request, nor the gateway's stop.

Spans leave through the SDK's batch processor: a bounded queue (``OTEL_BSP_MAX_QUEUE_SIZE``,
beyond it spans are dropped) and an export thread of its own. Here the collector takes an
export and never answers: while that export hangs, requests (far more spans than the queue
holds) are all answered, and the gateway still stops within ``SHUTDOWN_SECONDS``. The same
with nothing listening at the endpoint, over HTTP and over gRPC.
"""

from __future__ import annotations

import asyncio
import contextlib

from gateway.tracing.provider import SHUTDOWN_SECONDS
from tests.gateway.tracing.conftest import traced
from tests.support.gateway import serving
from tests.support.servers import free_port

QUEUE = 16
REQUESTS = 5 * QUEUE
STOP_DEADLINE = SHUTDOWN_SECONDS + 10  # the bound under test, plus the app's own stop


def chat() -> dict:
    return {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


async def answered_while(settings, before_requests=None) -> list[int]:
    """Statuses of REQUESTS chat calls (``before_requests`` awaited after the first); the stop is bounded."""
    stack = contextlib.AsyncExitStack()
    client = await stack.enter_async_context(serving(settings))
    try:
        statuses = [(await client.post("/v1/chat/completions", json=chat())).status_code]
        if before_requests is not None:
            await before_requests()
        calls = [client.post("/v1/chat/completions", json=chat()) for _ in range(REQUESTS)]
        statuses += [response.status_code for response in await asyncio.gather(*calls)]
    finally:
        await asyncio.wait_for(stack.aclose(), STOP_DEADLINE)
    return statuses


async def test_a_collector_that_never_answers_holds_up_no_request(make_settings, receiver):
    receiver.hang()
    settings = make_settings(**traced(receiver, otel_bsp_max_queue_size=QUEUE, otel_exporter_otlp_timeout=600_000))

    async def export_stuck() -> None:  # the export thread is inside the collector, waiting for an answer
        await asyncio.to_thread(receiver.wait_for_exports, 1)

    statuses = await answered_while(settings, export_stuck)
    assert statuses == [200] * (REQUESTS + 1)
    assert receiver.spans == []  # nothing was ever answered, and nothing waited for it


async def test_nothing_listening_at_the_endpoint_holds_up_no_request(make_settings):
    endpoint = f"http://127.0.0.1:{free_port()}/v1/traces"
    settings = make_settings(otel_exporter_otlp_traces_endpoint=endpoint, otel_bsp_schedule_delay=50,
                             otel_bsp_max_queue_size=QUEUE)
    assert await answered_while(settings) == [200] * (REQUESTS + 1)


async def test_a_dead_grpc_collector_holds_up_no_request(make_settings):
    settings = make_settings(otel_exporter_otlp_endpoint=f"http://127.0.0.1:{free_port()}",
                             otel_exporter_otlp_protocol="grpc", otel_bsp_schedule_delay=50,
                             otel_bsp_max_queue_size=QUEUE)
    assert await answered_while(settings) == [200] * (REQUESTS + 1)
