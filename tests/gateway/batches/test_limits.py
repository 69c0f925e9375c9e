"""Batch lines obey their key's limits as its live requests do: a rate limit is waited out, a spent budget fails the line.

A database key made with the admin API creates the batch (the official SDK, a real uvicorn
gateway, the fake engine, which answers ``usage`` of 5 prompt tokens and ``max_tokens``
completion tokens).
"""

from __future__ import annotations

import asyncio
import io
import threading
import time

import httpx
import openai
import orjson
import pytest

from tests.gateway.batches.conftest import admin, chat_line, database, jobs_ready, wait_status
from tests.support.gateway import running_gateway

DEADLINE = 60.0


async def new_key(base_url: str, limits: dict) -> dict:
    answer = await admin(base_url, "POST", "/admin/keys", json={"name": "batcher", "role": "read", "limits": limits})
    assert answer.status_code == 201, answer.text
    return answer.json()


async def submit(client: openai.AsyncOpenAI, lines: list[dict]) -> str:
    content = b"".join(orjson.dumps(line) + b"\n" for line in lines)
    file = await client.files.create(file=("in.jsonl", io.BytesIO(content)), purpose="batch")
    batch = await client.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions",
                                        completion_window="24h")
    return batch.id


def chats(fake_engine) -> list:
    return [received for received in fake_engine.received if received.path == "/v1/chat/completions"]


async def test_a_spent_budget_fails_each_line_in_the_error_file_and_the_batch_goes_on(jobs_settings, fake_engine):
    async with running_gateway(jobs_settings()) as (base_url, _):
        await jobs_ready(base_url)
        key = await new_key(base_url, {"budget_tokens": 1, "budget_period": "total"})  # less than any prompt
        async with openai.AsyncOpenAI(base_url=base_url + "/v1", api_key=key["key"], max_retries=0) as client:
            batch_id = await submit(client, [chat_line(f"r{n}", "fake-model") for n in range(3)])
            batch = await wait_status(lambda: client.batches.retrieve(batch_id), ("completed", "failed"))
            assert batch.status == "completed"
            assert (batch.request_counts.completed, batch.request_counts.failed) == (0, 3)
            assert batch.output_file_id is None
            errors = [orjson.loads(line) for line in
                      (await client.files.content(batch.error_file_id)).text.splitlines()]
    assert [line["custom_id"] for line in errors] == ["r0", "r1", "r2"]
    for line in errors:
        assert line["error"]["code"] == "insufficient_quota" and "budget" in line["error"]["message"]
        assert line["response"]["status_code"] == 429
        assert line["response"]["body"]["error"]["code"] == "insufficient_quota"
    assert chats(fake_engine) == []  # refused before the engine


async def test_a_rate_limited_line_waits_and_runs_when_the_limit_allows(jobs_settings, fake_engine):
    settings = jobs_settings(batch_concurrency=1)
    async with running_gateway(settings) as (base_url, app):
        await jobs_ready(base_url)
        executor = app.state.jobs.worker.executor
        asked: list[float] = []
        released = threading.Event()  # (the gateway runs in a thread of its own)

        async def pause(seconds: float) -> None:
            """Stands for the wait of Retry-After: until the test raised the limit (or its deadline)."""
            asked.append(seconds)
            deadline = time.monotonic() + DEADLINE
            while not released.is_set():
                assert time.monotonic() < deadline, "the test never raised the limit"
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)  # (the key's limits are read again within a second)

        executor._pause = pause
        key = await new_key(base_url, {"rpm": 1})
        async with openai.AsyncOpenAI(base_url=base_url + "/v1", api_key=key["key"], max_retries=0) as client:
            batch_id = await submit(client, [chat_line(f"r{n}", "fake-model") for n in range(2)])
            deadline = time.monotonic() + DEADLINE
            while not asked:  # the second line met the limit
                assert time.monotonic() < deadline, "no line was held by the key's rpm"
                await asyncio.sleep(0.02)
            batch = await client.batches.retrieve(batch_id)
            # Waiting, not failed: one line done, the other held by the key's rpm, not yet sent.
            assert batch.status == "in_progress"
            assert (batch.request_counts.completed, batch.request_counts.failed) == (1, 0)
            assert len(chats(fake_engine)) == 1
            assert 1 < asked[0] <= 60  # the refusal's Retry-After: what is left of the minute
            raised = await admin(base_url, "PATCH", f"/admin/keys/{key['id']}", json={"limits": {"rpm": 100}})
            assert raised.status_code == 200, raised.text
            released.set()
            batch = await wait_status(lambda: client.batches.retrieve(batch_id), ("completed", "failed"))
            assert batch.status == "completed"
            assert (batch.request_counts.completed, batch.request_counts.failed) == (2, 0)
            output = [orjson.loads(line) for line in (await client.files.content(batch.output_file_id)).text.splitlines()]
    assert sorted(line["custom_id"] for line in output) == ["r0", "r1"]
    assert len(chats(fake_engine)) == 2  # each line once


async def test_lines_count_against_the_keys_rpm_with_its_live_requests(jobs_settings, fake_engine):
    async with running_gateway(jobs_settings()) as (base_url, _):
        await jobs_ready(base_url)
        key = await new_key(base_url, {"rpm": 1})
        async with openai.AsyncOpenAI(base_url=base_url + "/v1", api_key=key["key"], max_retries=0) as client:
            batch_id = await submit(client, [chat_line("r0", "fake-model")])
            batch = await wait_status(lambda: client.batches.retrieve(batch_id), ("completed", "failed"))
            assert batch.request_counts.completed == 1
        async with httpx.AsyncClient(base_url=base_url, headers={"authorization": f"Bearer {key['key']}"}) as http:
            live = await http.post("/v1/chat/completions", json={
                "model": "fake-model", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]})
    assert live.status_code == 429 and live.json()["error"]["code"] == "rate_limit_exceeded"  # the line took it


async def test_a_prompt_past_the_keys_tpm_fails_its_line_rather_than_waiting_for_ever(jobs_settings, fake_engine):
    async with running_gateway(jobs_settings()) as (base_url, _):
        await jobs_ready(base_url)
        key = await new_key(base_url, {"tpm": 2})  # less than any prompt: no minute would let it through
        async with openai.AsyncOpenAI(base_url=base_url + "/v1", api_key=key["key"], max_retries=0) as client:
            batch_id = await submit(client, [chat_line("r0", "fake-model")])
            batch = await wait_status(lambda: client.batches.retrieve(batch_id), ("completed", "failed"))
            assert (batch.status, batch.request_counts.failed) == ("completed", 1)
            [line] = [orjson.loads(line) for line in
                      (await client.files.content(batch.error_file_id)).text.splitlines()]
    assert line["error"]["code"] == "rate_limit_exceeded" and line["response"]["status_code"] == 429
    assert chats(fake_engine) == []


@pytest.mark.parametrize("stop", ["cancel", "window"])
async def test_a_stop_ends_a_line_waiting_for_the_rate_limit_before_the_engine(jobs_settings, fake_engine, stop):
    settings = jobs_settings(batch_concurrency=1)
    async with running_gateway(settings) as (base_url, app):
        await jobs_ready(base_url)
        waiting = threading.Event()  # (the gateway runs in a thread of its own)

        async def pause(seconds: float) -> None:
            """Stands for the wait of Retry-After, ended by nothing but the batch's stop."""
            waiting.set()
            await asyncio.Event().wait()

        app.state.jobs.worker.executor._pause = pause
        key = await new_key(base_url, {"rpm": 1})
        async with openai.AsyncOpenAI(base_url=base_url + "/v1", api_key=key["key"], max_retries=0) as client:
            batch_id = await submit(client, [chat_line(f"r{n}", "fake-model") for n in range(3)])
            deadline = time.monotonic() + DEADLINE
            while not waiting.is_set():  # the second line met the key's rpm
                assert time.monotonic() < deadline, "no line was held by the key's rpm"
                await asyncio.sleep(0.02)
            if stop == "cancel":
                cancelling = await client.batches.cancel(batch_id)
                assert cancelling.status == "cancelling"
            else:  # the completion window ends now (the batch's 24 h, moved)
                with database(settings) as connection:
                    connection.execute("UPDATE gateway_batches SET expires_at = ? WHERE id = ?",
                                       (time.time() - 1, batch_id))
            ended = "cancelled" if stop == "cancel" else "expired"
            batch = await wait_status(lambda: client.batches.retrieve(batch_id), (ended,))
            errors = [orjson.loads(line) for line in
                      (await client.files.content(batch.error_file_id)).text.splitlines()]
    assert (batch.request_counts.completed, batch.request_counts.failed) == (1, 2)
    assert sorted(line["custom_id"] for line in errors) == ["r1", "r2"]  # the waiting line and the one not started
    assert {line["error"]["code"] for line in errors} == {f"batch_{ended}"}
    assert len(chats(fake_engine)) == 1  # the waiting line never reached the engine
