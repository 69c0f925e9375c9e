"""A batch whose key is revoked stops: lines at the engine finish, no other line starts, the rest are 401 error lines.

A database key made with the admin API creates the batch (the official SDKs, a real uvicorn
gateway, the fake engine holding its answers until the test releases them). The lines read
their key through a cache (``callers``, ``CALLER_TTL_SECONDS``): the test drives that cache's
clock, so "the revocation is seen" is a step of the test, not a wait. A revoked key can no
longer read its batch (401), so the test reads the batch and its files in the database.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from types import SimpleNamespace

import anthropic
import httpx
import openai
import orjson

from gateway.batches.callers import CALLER_TTL_SECONDS
from gateway.batches.results import anthropic_line
from tests.gateway.batches.conftest import admin, chat_line, database, jobs_ready
from tests.gateway.batches.test_limits import new_key, submit
from tests.support.gateway import running_gateway

DEADLINE = 60.0


def frozen_cache(app) -> list[float]:
    """The line callers' cache clock, as a value the test moves (the cache starts empty)."""
    callers = app.state.jobs.worker.executor.callers
    now = [0.0]
    callers.clock = lambda: now[0]
    callers._cache.clear()
    return now


async def at_engine(fake_engine, path: str, count: int) -> None:
    deadline = time.monotonic() + DEADLINE
    while sum(1 for received in fake_engine.received if received.path == path) < count:
        assert time.monotonic() < deadline, f"fewer than {count} lines reached the engine"
        await asyncio.sleep(0.02)


async def revoke(base_url: str, key_id: str, now: list[float]) -> None:
    revoked = await admin(base_url, "DELETE", f"/admin/keys/{key_id}")
    assert revoked.status_code == 200, revoked.text
    now[0] += CALLER_TTL_SECONDS + 0.001  # the key's cached answer has run out: the next line reads it again


async def ended(settings, batch_id: str) -> sqlite3.Row:
    deadline = time.monotonic() + DEADLINE
    while True:
        with database(settings) as connection:
            row = connection.execute("SELECT * FROM gateway_batches WHERE id = ?", (batch_id,)).fetchone()
        if row["status"] in ("completed", "failed", "cancelled", "expired"):
            return row
        assert time.monotonic() < deadline, f"the batch is still {row['status']}"
        await asyncio.sleep(0.05)


def file_lines(settings, file_id: str | None) -> list[dict]:
    if file_id is None:
        return []
    with database(settings) as connection:
        data = b"".join(row["data"] for row in connection.execute(
            "SELECT data FROM gateway_file_chunks WHERE file_id = ? ORDER BY seq", (file_id,)))
    return [orjson.loads(line) for line in data.splitlines()]


async def live_answer(base_url: str, secret: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=base_url, headers={"authorization": f"Bearer {secret}"}) as http:
        return await http.post("/v1/chat/completions", json={
            "model": "fake-model", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]})


async def test_a_revoked_keys_batch_fails_and_no_line_starts_after(jobs_settings, fake_engine):
    fake_engine.answer_hold = asyncio.Event()
    settings = jobs_settings(batch_concurrency=2)
    async with running_gateway(settings) as (base_url, app):
        await jobs_ready(base_url)
        now = frozen_cache(app)
        key = await new_key(base_url, {})
        async with openai.AsyncOpenAI(base_url=base_url + "/v1", api_key=key["key"], max_retries=0) as client:
            batch_id = await submit(client, [chat_line(f"r{n}", "fake-model") for n in range(6)])
            await at_engine(fake_engine, "/v1/chat/completions", 2)  # both slots' lines at the engine
            await revoke(base_url, key["id"], now)
            fake_engine.answer_hold.set()  # the two lines already running finish
            batch = await ended(settings, batch_id)
            with_revoked = await live_answer(base_url, key["key"])
    assert with_revoked.status_code == 401 and with_revoked.json()["error"]["code"] == "invalid_api_key"
    assert len(fake_engine.received) == 2  # no line started after the revocation was seen
    assert batch["status"] == "failed" and batch["failed_at"]
    assert [(error["code"], error["line"]) for error in orjson.loads(batch["errors"])] == [("invalid_api_key", None)]
    assert (batch["completed"], batch["failed"]) == (2, 4)
    output = file_lines(settings, batch["output_file_id"])
    errors = file_lines(settings, batch["error_file_id"])
    assert len(output) == 2 and {line["response"]["status_code"] for line in output} == {200}
    assert len(errors) == 4 and sorted(line["custom_id"] for line in output + errors) == [f"r{n}" for n in range(6)]
    for line in errors:
        assert line["error"]["code"] == "invalid_api_key" and "revoked" in line["error"]["message"]
        assert line["response"]["status_code"] == 401
        assert line["response"]["body"]["error"]["code"] == "invalid_api_key"


async def test_a_revoked_keys_messages_batch_ends_with_authentication_errors(jobs_settings, fake_engine):
    fake_engine.answer_hold = asyncio.Event()
    settings = jobs_settings(batch_concurrency=1)
    async with running_gateway(settings) as (base_url, app):
        await jobs_ready(base_url)
        now = frozen_cache(app)
        key = await new_key(base_url, {})
        async with anthropic.AsyncAnthropic(base_url=base_url, api_key=key["key"], max_retries=0) as client:
            params = {"model": "fake-model", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
            batch = await client.messages.batches.create(
                requests=[{"custom_id": f"m{n}", "params": params} for n in range(4)])
            await at_engine(fake_engine, "/v1/messages", 1)
            await revoke(base_url, key["id"], now)
            fake_engine.answer_hold.set()
            row = await ended(settings, batch.id)
            with database(settings) as connection:
                lines = {line["custom_id"]: line for line in connection.execute(
                    "SELECT * FROM gateway_batch_lines WHERE batch_id = ?", (batch.id,))}
    assert len(fake_engine.received) == 1  # the line at the engine, none after
    assert row["status"] == "failed"  # shown as processing_status "ended" by Anthropic's API
    refused = [line for line in lines.values() if line["status_code"] == 401]
    assert len(refused) == 3 and {line["outcome"] for line in refused} == {"errored"}
    for line in refused:  # as GET .../results shows them
        result = orjson.loads(anthropic_line(SimpleNamespace(**dict(line))))["result"]
        assert result["type"] == "errored" and result["error"]["error"]["type"] == "authentication_error"
        assert "revoked" in result["error"]["error"]["message"]
