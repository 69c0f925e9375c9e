"""A gateway restart mid-stream (SQLite): what was persisted replays, and the end is explicit."""

from __future__ import annotations

import asyncio
import signal
import sqlite3

import pytest

from tests.support.engine_gateway import engine_chat_body
from tests.support.gateway_process import GatewayProcess
from tests.support.sse_client import fresh_client, read_stream
from tests.support.waiting import until

pytestmark = [pytest.mark.integration, pytest.mark.engine]

LONG = 8000
GENERATED = "vllm:generation_tokens_total"


def persisted_events(db_path) -> int:
    with sqlite3.connect(db_path) as db:
        (count,) = db.execute("SELECT COALESCE(MAX(last_idx) + 1, 0) FROM stream_chunks").fetchone()
    return count


async def until_persisted(db_path, count: int, timeout: float = 30) -> None:
    async def enough() -> bool:
        return await asyncio.to_thread(persisted_events, db_path) >= count
    await until(enough, timeout, what=f"{count} events persisted", interval=0.02)


@pytest.fixture
def sqlite_env(tmp_path):
    db = tmp_path / "sessions.db"
    return db, {"SESSION_STORE": "sqlite", "DATABASE_URL": f"sqlite:///{db}", "SESSION_LEASE_SECONDS": "2"}


async def freeze_while_the_client_is_ahead(gateway: GatewayProcess, db_path, events: list) -> int:
    """SIGSTOP ``gateway`` at a moment its client holds events the store does not; the count stored.

    With a flush a second the client is ahead most of the time (it reads each event as it is
    produced); a flush that slips in between the look and the freeze makes it try again (a few
    times at most: each try waits for ten more events).
    """
    for _ in range(10):
        await until_persisted(db_path, 20)
        ahead_of = await asyncio.to_thread(persisted_events, db_path) + 10
        await until(lambda: len(events) > ahead_of, 60, what="the client ahead of the store")  # noqa: B023
        gateway.process.send_signal(signal.SIGSTOP)
        stored = await asyncio.to_thread(persisted_events, db_path)  # frozen: nothing more is written
        if stored < len(events):
            return stored
        gateway.process.send_signal(signal.SIGCONT)
    raise AssertionError("the store caught up with the client at each of 10 freezes")


async def test_killed_gateway_the_persisted_part_replays_then_an_explicit_error_end(idle_vllm_engine, probe, tmp_path,
                                                                                    sqlite_env, figures):
    """SIGKILL while the client holds events the last, unflushed batch had (the issue's finding 3).

    After the restart on the same file: a replay from the start gives everything persisted and
    then the ending, with no gap; the client resuming from its own last id gets the ending at
    once at ids it has not seen (never silence, never an id it holds with other content); a
    client behind the store gets the stored events it lacks, then the ending.
    """
    engine = idle_vllm_engine
    db, env = sqlite_env
    env = {**env, "SESSION_FLUSH_INTERVAL": "1"}
    generated_before = await probe.metric(GENERATED)
    first = await GatewayProcess(engine, tmp_path / "gw1.log", **env).start()
    try:
        async with fresh_client(first.base_url) as client:
            events: list = []
            reading = asyncio.create_task(read_stream(client, "POST", "/v1/chat/completions", live=events,
                                                      json=engine_chat_body(engine, LONG, session_id="crash-1")))
            stored = await freeze_while_the_client_is_ahead(first, db, events)
            await first.stop(signal.SIGKILL)  # no shutdown code runs: no ending is written
            seen = await reading
    finally:
        await first.stop(signal.SIGKILL)
    assert seen.cut and not any(event.done for event in seen.events)
    assert await asyncio.to_thread(persisted_events, db) == stored < len(seen.events)
    # The dead gateway's connection to vLLM closed with it: the engine aborts the generation.
    await probe.wait_until_nothing_runs(timeout=60)
    assert await probe.metric(GENERATED) - generated_before < LONG / 2

    second = await GatewayProcess(engine, tmp_path / "gw2.log", **env).start()
    try:
        async with fresh_client(second.base_url) as client:
            # Each read is bounded (30 s): the producer's lease (2 s), then the explicit end; never a hang.
            ahead = await read_stream(client, "GET", "/v1/sessions/crash-1/events",
                                      headers={"Last-Event-ID": seen.last_id}, timeout=30)
            replay = await read_stream(client, "GET", "/v1/sessions/crash-1/events", timeout=30)
            behind = await read_stream(client, "GET", "/v1/sessions/crash-1/events",
                                       headers={"Last-Event-ID": f"crash-1:{stored - 6}"}, timeout=30)
            state = (await client.get("/v1/sessions/crash-1")).json()
            again = await client.get("/v1/sessions/crash-1/events", headers={"Last-Event-ID": replay.last_id})
    finally:
        await second.stop()
    received = len(seen.events)
    assert ahead.status == 200 and ahead.indices == [received, received + 1]
    assert ahead.events[0].json["error"]["code"] == "producer_lost"
    assert f"events from index {stored} on were never persisted" in ahead.events[0].json["error"]["message"]
    assert ahead.events[1].done

    assert replay.status == 200
    assert replay.indices == list(range(stored + 2))  # everything persisted, then the ending: no gap
    assert stored >= 20 and [e.data for e in replay.events[:stored]] == [e.data for e in seen.events[:stored]]
    assert replay.events[-2].json["error"]["code"] == "producer_lost"
    assert replay.events[-1].done and replay.dones == 1

    assert behind.indices == list(range(stored - 5, stored + 2))
    assert [e.data for e in behind.events[:5]] == [e.data for e in seen.events[stored - 5:stored]]
    assert behind.events[-2].json["error"]["code"] == "producer_lost" and behind.events[-1].done
    assert state["status"] == "ended" and state["how"] == "error"
    assert again.status_code == 204
    figures["client_ahead_of_store_by_events"] = received - stored


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
    await probe.wait_until_nothing_runs(timeout=60)

    second = await GatewayProcess(engine, tmp_path / "gw2.log", **env).start()
    try:
        async with fresh_client(second.base_url) as client:
            replay = await read_stream(client, "POST", "/v1/chat/completions",
                                       json=engine_chat_body(engine, LONG, session_id="stop-1"),
                                       headers={"Last-Event-ID": "stop-1:9"})
    finally:
        await second.stop()
    assert replay.events[0].index == 10
    assert [e.data for e in replay.events[:10]] == [e.data for e in seen.events[10:20]]
    assert replay.indices == list(range(10, 10 + len(replay.events)))
    # gateway_shutdown, not producer_lost: the end was written at shutdown, not after a lease ran out.
    assert replay.events[-2].json["error"]["code"] == "gateway_shutdown"
    assert replay.dones == 1
