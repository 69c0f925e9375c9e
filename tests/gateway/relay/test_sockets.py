"""Behaviour only a real socket shows: keep-alives during silence, disconnects reaching the engine."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from gateway.app import create_app
from tests.support.bodies import CHAT, chat_body
from tests.support.servers import serve_uvicorn
from tests.support.waiting import until


async def test_keepalive_comments_fill_long_silences(make_settings, fake_engine):
    fake_engine.first_chunk_delay = 1.0
    app = create_app(make_settings(sse_keepalive_seconds=0.2))
    async with serve_uvicorn(app) as url, httpx.AsyncClient(timeout=10) as client:
        async with client.stream("POST", url + CHAT, json=chat_body(stream=True, max_tokens=2)) as response:
            lines = [line async for line in response.aiter_lines() if line]
    first_data = next(i for i, line in enumerate(lines) if line.startswith("data:"))
    assert ": keep-alive" in lines[:first_data]
    assert lines[-1] == "data: [DONE]"


async def test_client_leaving_a_stream_closes_the_upstream_request(make_settings, fake_engine):
    fake_engine.chunk_delay = 0.02
    app = create_app(make_settings())
    async with serve_uvicorn(app) as url, httpx.AsyncClient(timeout=10) as client:
        async with client.stream("POST", url + CHAT, json=chat_body(stream=True, max_tokens=1000)) as response:
            async for line in response.aiter_lines():
                if line.startswith("data:"):
                    break
        await asyncio.wait_for(fake_engine.stream_aborted.wait(), timeout=5)
    assert fake_engine.streams_aborted == 1


async def test_client_leaving_a_plain_request_closes_the_upstream_request(make_settings, fake_engine):
    fake_engine.mode = "hang"
    app = create_app(make_settings())
    async with serve_uvicorn(app) as url, httpx.AsyncClient(timeout=10) as client:
        pending = asyncio.create_task(client.post(url + CHAT, json=chat_body()))
        await until(lambda: fake_engine.received, what="the request at the engine")
        pending.cancel()
        await asyncio.gather(pending, return_exceptions=True)
        await asyncio.wait_for(fake_engine.request_aborted.wait(), timeout=5)


async def test_a_client_that_leaves_is_counted_as_499_not_as_a_server_error(make_settings, fake_engine):
    """An impatient client is not a 5xx: alerts on the server-error rate must not fire for it."""
    fake_engine.mode = "hang"
    app = create_app(make_settings())
    async with serve_uvicorn(app) as url, httpx.AsyncClient(timeout=10) as client:
        pending = asyncio.create_task(client.post(url + CHAT, json=chat_body()))
        await until(lambda: fake_engine.received, what="the request at the engine")
        pending.cancel()
        await asyncio.gather(pending, return_exceptions=True)
        await asyncio.wait_for(fake_engine.request_aborted.wait(), timeout=5)
        registry = app.state.gateway.metrics.registry
        # (the middleware records it once the request's task is done)
        await until(lambda: registry.get_sample_value("gateway_requests_total", {"route": CHAT, "status": "499"})
                    is not None, what="the 499 counted")
        server_errors = registry.get_sample_value("gateway_requests_total", {"route": CHAT, "status": "500"})
    assert registry.get_sample_value("gateway_requests_total", {"route": CHAT, "status": "499"}) == 1
    assert server_errors is None


@pytest.mark.parametrize("session_store", ["off", "sqlite"])
async def test_streams_that_end_leave_their_engine_connection_for_the_next_request(make_settings, fake_engine,
                                                                                   session_store):
    fake_engine.end_delay = 0.05  # as from vLLM: [DONE], then the body's last chunk on its own
    # No polling meanwhile: every request to the engine below is the test's own.
    app = create_app(make_settings(session_store=session_store, engine_poll_interval=3600, engine_metrics_interval=0))
    async with serve_uvicorn(app) as url, httpx.AsyncClient(timeout=10) as client:
        for _ in range(3):
            async with client.stream("POST", url + CHAT, json=chat_body(stream=True, max_tokens=5)) as response:
                lines = [line async for line in response.aiter_lines() if line.startswith("data:")]
            assert lines[-1] == "data: [DONE]"
        # One TCP connection to the engine, opened by the gateway's first look at it, for all three.
        assert len(fake_engine.client_ports) == 1

        fake_engine.chunk_delay = 0.02
        async with client.stream("POST", url + CHAT, json=chat_body(stream=True, max_tokens=1000)) as response:
            async for line in response.aiter_lines():
                if line.startswith("data:"):
                    break
        await asyncio.wait_for(fake_engine.stream_aborted.wait(), timeout=5)
        fake_engine.chunk_delay = 0.0
        response = await client.post(url + CHAT, json=chat_body(stream=True, max_tokens=5))
        assert response.text.rstrip().endswith("data: [DONE]")
    # The abandoned stream's connection was closed (so vLLM aborted it); the next request opened another.
    assert len(fake_engine.client_ports) == 2


async def test_a_body_that_does_not_end_after_its_done_is_closed_and_the_stream_still_ends(make_settings,
                                                                                          fake_engine):
    fake_engine.end_delay = 3600  # [DONE], then the engine keeps the body open
    app = create_app(make_settings(engine_poll_interval=3600, engine_metrics_interval=0))
    async with serve_uvicorn(app) as url, httpx.AsyncClient(timeout=10) as client:
        for _ in range(2):
            response = await client.post(url + CHAT, json=chat_body(stream=True, max_tokens=5))
            assert response.text.rstrip().endswith("data: [DONE]")
    assert len(fake_engine.client_ports) == 2  # each one's connection closed: it could not be kept
