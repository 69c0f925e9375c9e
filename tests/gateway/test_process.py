"""The gateway as its own process (``python -m gateway``) in front of the fake engine.

What only a real process shows: SIGTERM ending every open stream explicitly before the
connections close, and the connection bound uvicorn enforces.
"""

from __future__ import annotations

import asyncio
import signal

import httpx
import orjson

from tests.support.gateway_process import GatewayProcess
from tests.support.sse_client import read_stream


def chat(max_tokens: int, **extra) -> dict:
    return {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "stream": True,
            "max_tokens": max_tokens, **extra}


async def first_events_then_sigterm(gateway: GatewayProcess, body: dict) -> list[dict | str]:
    """Stream ``body``; after the first content event SIGTERM the gateway; every event the client got."""
    got: list[dict | str] = []
    async with httpx.AsyncClient(timeout=30) as client:
        async with client.stream("POST", gateway.base_url + "/v1/chat/completions", json=body) as response:
            assert response.status_code == 200
            stopping = None
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                got.append(data if data == "[DONE]" else orjson.loads(data))
                if stopping is None and len(got) >= 2:
                    stopping = asyncio.create_task(gateway.stop(signal.SIGTERM))
    # uvicorn re-raises the signal once it has shut down gracefully: death by SIGTERM, as supervisors expect.
    assert await stopping in (0, -signal.SIGTERM)
    return got


async def test_sigterm_ends_a_plain_stream_with_an_explicit_ending_before_exit(fake_engine, tmp_path):
    fake_engine.chunk_delay = 0.05
    gateway = await GatewayProcess(fake_engine, tmp_path / "gw.log", SESSION_STORE="off",
                                   GRACEFUL_SHUTDOWN_SECONDS="2").start()
    got = await first_events_then_sigterm(gateway, chat(10_000))
    assert got[-1] == "[DONE]"
    assert got[-2]["error"]["code"] == "gateway_shutdown"
    assert fake_engine.stream_aborted.is_set()


async def test_sigterm_ends_a_session_stream_with_an_explicit_ending_before_exit(fake_engine, tmp_path):
    fake_engine.chunk_delay = 0.05
    database = f"sqlite+aiosqlite:///{tmp_path}/gw.db"
    gateway = await GatewayProcess(fake_engine, tmp_path / "gw.log", SESSION_STORE="sqlite", DATABASE_URL=database,
                                   GRACEFUL_SHUTDOWN_SECONDS="2").start()
    got = await first_events_then_sigterm(gateway, chat(10_000, session_id="term-1"))
    assert got[-1] == "[DONE]" and got[-2]["error"]["code"] == "gateway_shutdown"
    restarted = await GatewayProcess(fake_engine, tmp_path / "gw2.log", SESSION_STORE="sqlite",
                                     DATABASE_URL=database).start()
    try:
        async with httpx.AsyncClient(timeout=30) as client:
            replay = await read_stream(client, "GET", restarted.base_url + "/v1/sessions/term-1/events")
    finally:
        await restarted.stop()
    assert [e.json if not e.done else "[DONE]" for e in replay.events] == got  # what it got is what was kept


async def test_a_resume_replays_from_the_store_while_the_engine_is_down(fake_engine, tmp_path):
    database = f"sqlite+aiosqlite:///{tmp_path}/gw.db"
    gateway = await GatewayProcess(fake_engine, tmp_path / "gw.log", SESSION_STORE="sqlite",
                                   DATABASE_URL=database).start()
    async with httpx.AsyncClient(timeout=30) as client:
        full = await read_stream(client, "POST", gateway.base_url + "/v1/chat/completions",
                                 json=chat(6, session_id="replay-1"))
    await gateway.stop()
    engine_url = fake_engine.base_url
    await fake_engine.stop()  # the engine is gone; the gateway starts without ever having seen it
    offline = GatewayProcess(fake_engine, tmp_path / "gw2.log", SESSION_STORE="sqlite", DATABASE_URL=database,
                             VLLM_BASE_URL=engine_url)
    offline.ready_path = "/livez"
    await offline.start()
    try:
        async with httpx.AsyncClient(timeout=30) as client:
            resumed = await read_stream(client, "POST", offline.base_url + "/v1/chat/completions",
                                        json=chat(6, session_id="replay-1"), headers={"Last-Event-ID": "replay-1:2"})
            fresh = await client.post(offline.base_url + "/v1/chat/completions", json=chat(6))
    finally:
        await offline.stop()
    assert resumed.status == 200
    assert [e.data for e in resumed.events] == [e.data for e in full.events[3:]]
    assert fresh.status_code == 503  # a new generation does need the engine


async def test_connections_beyond_max_connections_are_refused_by_the_server(fake_engine, tmp_path):
    gateway = await GatewayProcess(fake_engine, tmp_path / "gw.log", SESSION_STORE="off", MAX_CONNECTIONS="16").start()
    idle = []
    try:
        for _ in range(16):
            idle.append(await asyncio.open_connection("127.0.0.1", gateway.port))
        async with httpx.AsyncClient(timeout=10) as client:
            refused = await client.get(gateway.base_url + "/livez")
        for _, writer in idle:
            writer.close()
        async with httpx.AsyncClient(timeout=10) as client:
            while (await client.get(gateway.base_url + "/livez")).status_code != 200:
                await asyncio.sleep(0.05)  # the idle connections are closing
    finally:
        await gateway.stop()
    assert refused.status_code == 503
