"""The session's real services answer as the rest of the suite expects.

``vllm_engine``: launched through launch_vllm.sh, it serves the embedded model under its
served name, behind its API key, and its metrics parse. ``postgres_database_url``: a fresh
database per test, with the contrib extensions the marketplace uses.
"""

from __future__ import annotations

import asyncio
import time

import asyncpg
import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from tests.support.engine import EngineHandle

pytestmark = pytest.mark.integration


async def test_engine_lists_its_served_model_behind_the_api_key(vllm_engine: EngineHandle) -> None:
    async with httpx.AsyncClient(base_url=vllm_engine.base_url, timeout=30) as client:
        models = await client.get("/v1/models", headers=vllm_engine.headers)
        assert models.status_code == 200
        assert vllm_engine.model in [model["id"] for model in models.json()["data"]]
        if vllm_engine.api_key:  # always, unless STACK_TEST_ENGINE_URL points at a keyless engine
            assert (await client.get("/v1/models")).status_code == 401


async def test_engine_generates_and_its_metrics_count_the_tokens(idle_vllm_engine: EngineHandle) -> None:
    engine = idle_vllm_engine
    before = await engine.ametrics()
    assert before["vllm:num_requests_running"] == 0
    async with httpx.AsyncClient(base_url=engine.base_url, headers=engine.headers, timeout=120) as client:
        response = await client.post("/v1/chat/completions", json={
            "model": engine.model, "messages": [{"role": "user", "content": "Say hello."}],
            "max_tokens": 8, "temperature": 0,
        })
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["choices"][0]["message"]["content"]
    generated = body["usage"]["completion_tokens"]
    assert 1 <= generated <= 8

    deadline = time.monotonic() + 10
    while True:  # the counter is updated by the engine loop, not by the response
        delta = (await engine.ametrics())["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"]
        if delta >= generated or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    assert delta >= generated
    await engine.wait_until_idle(timeout=10)


@pytest.mark.parametrize("visit", [1, 2])
async def test_each_test_gets_a_fresh_database(postgres_database_url: str, visit: int) -> None:
    # Both visits create the same table: the second fails if databases were shared.
    assert postgres_database_url.startswith("postgresql+asyncpg://")
    engine = create_async_engine(postgres_database_url)
    try:
        async with engine.begin() as connection:
            tables = await connection.scalar(text("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"))
            assert tables == 0
            await connection.execute(text("CREATE TABLE visited (visit int)"))
            await connection.execute(text("INSERT INTO visited VALUES (:visit)"), {"visit": visit})
    finally:
        await engine.dispose()


async def test_database_has_the_contrib_extensions(postgres_database_url: str) -> None:
    connection = await asyncpg.connect(postgres_database_url.replace("postgresql+asyncpg://", "postgresql://", 1))
    try:
        for extension in ("cube", "earthdistance", "pg_trgm"):
            await connection.execute(f"CREATE EXTENSION {extension}")
        paris_london = await connection.fetchval(
            "SELECT earth_distance(ll_to_earth(48.8566, 2.3522), ll_to_earth(51.5074, -0.1278))")
        similarity = await connection.fetchval("SELECT similarity('espresso machine', 'espreso machine')")
    finally:
        await connection.close()
    assert 330_000 < paris_london < 360_000  # metres
    assert similarity > 0.5
