"""Stored and background responses outlive the gateway process (SQLite) and are shared by replicas (PostgreSQL).

Real gateway processes for the restarts (``python -m gateway``, stopped or killed), real
uvicorn servers on one real PostgreSQL for the replicas, the official openai SDK as client.
"""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import time

import openai
import pytest

from tests.gateway.protocols.conftest import KEY_A, KEY_B, RUNNING
from tests.support.gateway import running_gateway as gateway_on
from tests.support.gateway_process import GatewayProcess

pytestmark = [pytest.mark.integration, pytest.mark.engine]

FINAL = ("completed", "incomplete", "failed", "cancelled")


def client(url: str, key: str = KEY_A) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url + "/v1", api_key=key, max_retries=0)


def greedy(engine, tokens: int, **extra) -> dict:
    return dict(model=engine.model, input="Tell me about lighthouses.", max_output_tokens=tokens, temperature=0,
                extra_body={"ignore_eos": True}, **extra)


async def until_status(sdk, response_id: str, statuses, timeout: float = 90.0):
    deadline = time.monotonic() + timeout
    while True:
        got = await sdk.responses.retrieve(response_id)
        if got.status in statuses:
            return got
        assert time.monotonic() < deadline, f"still {got.status} after {timeout}s"
        await asyncio.sleep(0.1)


async def replay(sdk, response_id: str, **params) -> list:
    return [event async for event in await sdk.responses.retrieve(response_id, stream=True, **params)]


def persisted(db_path, response_id: str) -> int:
    """How many events of ``response_id``'s run the store holds."""
    with sqlite3.connect(db_path) as db:
        (count,) = db.execute("SELECT COALESCE(MAX(c.last_idx) + 1, 0) FROM stream_chunks c JOIN stream_sessions s "
                              "ON s.gen_id = c.gen_id WHERE s.session_id = ?", (response_id,)).fetchone()
    return count


async def until_persisted(db_path, response_id: str, count: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while await asyncio.to_thread(persisted, db_path, response_id) < count:
        assert time.monotonic() < deadline, f"fewer than {count} events persisted after {timeout}s"
        await asyncio.sleep(0.02)


@pytest.fixture
def sqlite_env(tmp_path):
    return {"SESSION_STORE": "sqlite", "DATABASE_URL": f"sqlite:///{tmp_path}/gateway.db", "API_KEYS": KEY_A,
            "SESSION_LEASE_SECONDS": "2", "FEATURES": "none"}


async def test_a_restarted_gateway_serves_what_the_first_one_stored(idle_vllm_engine, tmp_path, sqlite_env):
    engine = idle_vllm_engine
    first = await GatewayProcess(engine, tmp_path / "gw1.log", **sqlite_env).start()
    try:
        sdk = client(first.base_url)
        plain = await sdk.responses.create(model=engine.model, input="My name is Ada.", max_output_tokens=8,
                                           temperature=0)
        background = await sdk.responses.create(**greedy(engine, 48), background=True)
        done = await until_status(sdk, background.id, FINAL)
        events = await replay(sdk, background.id)
    finally:
        await first.stop()
    second = await GatewayProcess(engine, tmp_path / "gw2.log", **sqlite_env).start()
    try:
        sdk = client(second.base_url)
        assert (await sdk.responses.retrieve(plain.id)).model_dump() == plain.model_dump()
        assert (await sdk.responses.retrieve(background.id)).model_dump() == done.model_dump()
        again = await replay(sdk, background.id)
        follow = await sdk.responses.create(model=engine.model, input="What is my name?", max_output_tokens=8,
                                            temperature=0, previous_response_id=plain.id)
    finally:
        await second.stop()
    assert [e.model_dump() for e in again] == [e.model_dump() for e in events]
    assert follow.previous_response_id == plain.id and follow.usage.input_tokens > plain.usage.input_tokens


async def test_a_run_whose_gateway_died_ends_failed_never_stuck_in_progress(idle_vllm_engine, tmp_path, sqlite_env):
    engine = idle_vllm_engine
    first = await GatewayProcess(engine, tmp_path / "gw1.log", **sqlite_env).start()
    try:
        sdk = client(first.base_url)
        running = await sdk.responses.create(**greedy(engine, 8000), background=True)
        await until_status(sdk, running.id, ("in_progress",))
        stream = await sdk.responses.retrieve(running.id, stream=True)
        seen = []
        async for event in stream:  # events flow, and reach the store
            seen.append(event)
            if len(seen) == 40:
                break
        await until_persisted(tmp_path / "gateway.db", running.id, 40)
        await first.stop(signal.SIGKILL)  # nothing of the run's ending is written
    finally:
        await first.stop(signal.SIGKILL)
    second = await GatewayProcess(engine, tmp_path / "gw2.log", **sqlite_env).start()
    try:
        sdk = client(second.base_url)
        failed = await until_status(sdk, running.id, FINAL, timeout=30)  # after the dead producer's lease
        events = await replay(sdk, running.id)
    finally:
        await second.stop()
    assert failed.status == "failed" and failed.error.code == "producer_lost"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert len(events) > 40 and events[-1].type == "response.failed"
    assert [e.model_dump() for e in events[:40]] == [e.model_dump() for e in seen]


async def test_a_background_run_finishes_within_the_drains_grace_when_its_gateway_is_stopped(
        idle_vllm_engine, tmp_path, sqlite_env):
    # A rolling restart: SIGTERM while a background response runs. Streams with a client go on for
    # GRACEFUL_SHUTDOWN_SECONDS; a background run has no connection, so uvicorn began the shutdown at
    # once and the run was stopped there: `failed` with gateway_shutdown, its work lost, though the
    # grace period had seconds left for it.
    engine = idle_vllm_engine
    env = sqlite_env | {"GRACEFUL_SHUTDOWN_SECONDS": "60"}
    first = await GatewayProcess(engine, tmp_path / "gw1.log", **env).start()
    try:
        sdk = client(first.base_url)
        running = await sdk.responses.create(**greedy(engine, 600), background=True)
        assert (await until_status(sdk, running.id, ("in_progress", *FINAL))).status == "in_progress"
        await first.stop(signal.SIGTERM, timeout=90)
    finally:
        await first.stop(signal.SIGKILL)
    second = await GatewayProcess(engine, tmp_path / "gw2.log", **env).start()
    try:
        ended = await client(second.base_url).responses.retrieve(running.id)
    finally:
        await second.stop()
    assert ended.status == "incomplete" and ended.error is None, (ended.status, ended.error)
    assert ended.incomplete_details.reason == "max_output_tokens" and ended.usage.output_tokens == 600


def replica_settings(engine, tmp_path, database_url: str):
    from tests.gateway.protocols.conftest import surface_settings

    # The store's bound at 15 s, as tests/gateway/sessions/test_replicas.py has it: on this 2-core machine a
    # PostgreSQL call now and then takes over 5 s while the engine generates (a claim's plain SELECT, the
    # event loop not blocked); riding out a stalled store is test_store_hangs.py's subject, not this test's.
    return surface_settings(engine, tmp_path, session_store="postgres", database_url=database_url,
                            session_lease_seconds=10, session_store_timeout_seconds=15)


async def test_a_second_replica_retrieves_resumes_cancels_and_continues(idle_vllm_engine, tmp_path,
                                                                        postgres_database_url):
    engine = idle_vllm_engine
    async with gateway_on(replica_settings(engine, tmp_path, postgres_database_url)) as (a_url, _), \
            gateway_on(replica_settings(engine, tmp_path, postgres_database_url)) as (b_url, _):
        a, b, b_other = client(a_url), client(b_url), client(b_url, KEY_B)
        short = await a.responses.create(**greedy(engine, 64), background=True)
        seen_on_b = await b.responses.retrieve(short.id)
        assert seen_on_b.id == short.id and seen_on_b.background is True
        stream = await a.responses.create(**greedy(engine, 64), background=True, stream=True)
        first = []
        async for event in stream:
            first.append(event)
            if len(first) == 10:
                break
        await stream.close()
        rest = await replay(b, first[0].response.id, starting_after=first[-1].sequence_number)
        whole = first + rest
        done_on_b = await until_status(b, short.id, FINAL)
        done_on_a = await a.responses.retrieve(short.id)
        follow = await b.responses.create(model=engine.model, input="And then?", max_output_tokens=4,
                                          temperature=0, previous_response_id=short.id)
        with pytest.raises(openai.NotFoundError):
            await b_other.responses.retrieve(short.id)
        long = await a.responses.create(**greedy(engine, 8000), background=True)
        await until_status(b, long.id, ("in_progress",))
        cancelled = await b.responses.cancel(long.id)
        after = (await engine_running(engine), await a.responses.retrieve(long.id))
    assert [e.sequence_number for e in whole] == list(range(len(whole))) and whole[-1].type == "response.incomplete"
    assert done_on_b.model_dump() == done_on_a.model_dump() and done_on_b.usage.output_tokens == 64
    assert follow.previous_response_id == short.id and follow.usage.input_tokens > done_on_b.usage.input_tokens
    assert cancelled.status == "cancelled" and after[1].status == "cancelled"
    assert after[0] == 0  # replica A stopped the run: vLLM aborted it


async def engine_running(engine, timeout: float = 15.0) -> float:
    """What runs in vLLM once it is 0 or ``timeout`` passed, as of steps of its own (its gauges move in bursts)."""
    deadline = time.monotonic() + timeout
    while (value := await engine.arunning_after_a_step()) != 0 and time.monotonic() < deadline:
        pass
    return value


async def test_background_runs_on_the_memory_store_and_retention_is_a_setting(idle_vllm_engine, tmp_path):
    from tests.gateway.protocols.conftest import surface_settings

    engine = idle_vllm_engine
    async with gateway_on(surface_settings(engine, tmp_path, session_store="memory")) as (url, _):
        sdk = client(url)
        run = await sdk.responses.create(**greedy(engine, 32), background=True)
        done = await until_status(sdk, run.id, FINAL)
        events = await replay(sdk, run.id)
        rest = await replay(sdk, run.id, starting_after=10)
    assert done.status == "incomplete" and done.usage.output_tokens == 32
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert [e.model_dump() for e in rest] == [e.model_dump() for e in events[11:]]
    # Retention: a response older than RESPONSES_RETENTION_SECONDS is gone (here at once).
    async with gateway_on(surface_settings(engine, tmp_path, responses_retention_seconds=0.001)) as (url, _):
        sdk = client(url)
        reply = await sdk.responses.create(**greedy(engine, 4))
        with pytest.raises(openai.NotFoundError):
            await sdk.responses.retrieve(reply.id)
        with pytest.raises(openai.NotFoundError):
            await sdk.responses.create(**greedy(engine, 4), previous_response_id=reply.id)
