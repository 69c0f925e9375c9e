"""A gateway restart mid-stream (SQLite): what was persisted replays, and the end is explicit."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import time

import pytest

from tests.support.engine_gateway import RUNNING, engine_chat_body
from tests.support.gateway_process import GatewayProcess
from tests.support.sse_client import fresh_client, read_stream

pytestmark = [pytest.mark.integration, pytest.mark.engine]

LONG = 8000


def persisted_events(db_path) -> int:
    with sqlite3.connect(db_path) as db:
        (count,) = db.execute("SELECT COALESCE(MAX(last_idx) + 1, 0) FROM stream_chunks").fetchone()
    return count


async def until_persisted(db_path, count: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while await asyncio.to_thread(persisted_events, db_path) < count:
        assert time.monotonic() < deadline, f"fewer than {count} events persisted after {timeout}s"
        await asyncio.sleep(0.02)


@pytest.fixture
def sqlite_env(tmp_path):
    db = tmp_path / "sessions.db"
    return db, {"SESSION_STORE": "sqlite", "DATABASE_URL": f"sqlite:///{db}", "SESSION_LEASE_SECONDS": "2"}


async def test_killed_gateway_the_persisted_part_replays_then_an_explicit_error_end(idle_vllm_engine, probe, tmp_path, sqlite_env):
    engine = idle_vllm_engine
    db, env = sqlite_env
    first = await GatewayProcess(engine, tmp_path / "gw1.log", **env).start()
    try:
        async with fresh_client(first.base_url) as client:
            reading = asyncio.create_task(read_stream(client, "POST", "/v1/chat/completions",
                                                      json=engine_chat_body(engine, LONG, session_id="crash-1"), stop_after=30))
            await until_persisted(db, 20)
            await first.stop(signal.SIGKILL)  # no shutdown code runs: no ending is written
            seen = await reading
        assert seen.cut or len(seen.events) == 30
    finally:
        await first.stop(signal.SIGKILL)
    # The dead gateway's connection to vLLM closed with it: the engine aborts the generation.
    await probe.wait_for(RUNNING, lambda v: v == 0, timeout=2.0)
    stored = await asyncio.to_thread(persisted_events, db)

    second = await GatewayProcess(engine, tmp_path / "gw2.log", **env).start()
    try:
        async with fresh_client(second.base_url) as client:
            started = time.monotonic()
            replay = await read_stream(client, "GET", "/v1/sessions/crash-1/events", timeout=30)
            waited = time.monotonic() - started
            state = (await client.get("/v1/sessions/crash-1")).json()
            again = await client.get("/v1/sessions/crash-1/events", headers={"Last-Event-ID": replay.last_id})
    finally:
        await second.stop()
    assert replay.status == 200
    assert replay.indices == list(range(stored + 2))  # everything persisted, then the ending: no gap
    shared = min(len(seen.events), stored)
    assert shared >= 20 and [e.data for e in replay.events[:shared]] == [e.data for e in seen.events[:shared]]
    assert replay.events[-2].json["error"]["code"] == "producer_lost"
    assert replay.events[-1].done and replay.dones == 1
    assert waited < 2 + 5  # at most the producer's lease, then the explicit end; never a hang
    assert state["status"] == "ended" and state["how"] == "error"
    assert again.status_code == 204


async def test_stopped_gateway_ends_its_generations_before_exiting(idle_vllm_engine, probe, tmp_path, sqlite_env):
    engine = idle_vllm_engine
    db, env = sqlite_env
    first = await GatewayProcess(engine, tmp_path / "gw1.log", **env).start()
    try:
        async with fresh_client(first.base_url) as client:
            seen = await read_stream(client, "POST", "/v1/chat/completions",
                                     json=engine_chat_body(engine, LONG, session_id="stop-1"), stop_after=20)
        # uvicorn shuts down gracefully, then re-raises the signal it caught: exit code -15.
        assert await first.stop(signal.SIGTERM) in (0, -signal.SIGTERM)
    finally:
        await first.stop(signal.SIGKILL)
    await probe.wait_for(RUNNING, lambda v: v == 0, timeout=2.0)

    second = await GatewayProcess(engine, tmp_path / "gw2.log", **env).start()
    try:
        async with fresh_client(second.base_url) as client:
            started = time.monotonic()
            replay = await read_stream(client, "POST", "/v1/chat/completions",
                                       json=engine_chat_body(engine, LONG, session_id="stop-1"),
                                       headers={"Last-Event-ID": "stop-1:9"})
            waited = time.monotonic() - started
    finally:
        await second.stop()
    assert replay.events[0].index == 10
    assert [e.data for e in replay.events[:10]] == [e.data for e in seen.events[10:20]]
    assert replay.indices == list(range(10, 10 + len(replay.events)))
    assert replay.events[-2].json["error"]["code"] == "gateway_shutdown"
    assert replay.dones == 1
    assert waited < 2  # the end was written at shutdown: no lease to wait for
