"""A batch line runs as a live request does: billed to the batch's key, its band's priority, never the line's own.

The official SDK against a real (uvicorn) gateway in front of the fake engine, which records
every request it receives and answers ``usage`` of 5 prompt tokens and ``max_tokens``
completion tokens.
"""

from __future__ import annotations

import asyncio
import io
import time

import anthropic
import httpx
import openai
import orjson

from gateway.http.auth import KeyRing
from tests.gateway.batches.conftest import chat_line, jobs_ready, wait_status
from tests.support.gateway import OTHER_KEY, READ_KEY, WRITE_KEY, running_gateway


async def run_batch(base_url: str, lines: list[dict]) -> object:
    async with openai.AsyncOpenAI(base_url=base_url + "/v1", api_key=READ_KEY, max_retries=0) as client:
        content = b"".join(orjson.dumps(line) + b"\n" for line in lines)
        file = await client.files.create(file=("in.jsonl", io.BytesIO(content)), purpose="batch")
        batch = await client.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions",
                                            completion_window="24h")
        return await wait_status(lambda: client.batches.retrieve(batch.id), ("completed", "failed"))


async def own_usage(base_url: str, key: str, *, until_requests: int, timeout: float = 30.0) -> list[dict]:
    """``GET /v1/usage?group_by=route`` for ``key``, once it counts ``until_requests`` (the ledger flushes in the background)."""
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(base_url=base_url, headers={"authorization": f"Bearer {key}"}) as client:
        while True:
            answer = await client.get("/v1/usage", params={"group_by": "route"})
            assert answer.status_code == 200, answer.text
            rows = answer.json()["data"]
            if sum(row["requests"] for row in rows) >= until_requests:
                return rows
            assert time.monotonic() < deadline, f"usage still {rows} after {timeout}s"
            await asyncio.sleep(0.05)


async def test_lines_are_billed_to_the_batchs_key_on_the_batch_route(jobs_settings, fake_engine):
    settings = jobs_settings(usage_flush_seconds=0.1)
    async with running_gateway(settings) as (base_url, _):
        await jobs_ready(base_url)
        batch = await run_batch(base_url, [chat_line(f"r{n}", "fake-model", max_tokens=4 + n) for n in range(3)])
        assert batch.status == "completed" and batch.request_counts.completed == 3
        rows = await own_usage(base_url, READ_KEY, until_requests=3)
        assert [(row["route"], row["requests"], row["prompt_tokens"], row["completion_tokens"]) for row in rows] == \
            [("batch:/v1/chat/completions", 3, 15, 4 + 5 + 6)]
        assert batch.usage.input_tokens == 15 and batch.usage.output_tokens == 15
        async with httpx.AsyncClient(base_url=base_url, headers={"authorization": f"Bearer {OTHER_KEY}"}) as client:
            assert (await client.get("/v1/usage", params={"group_by": "route"})).json()["data"] == []
        async with httpx.AsyncClient(headers={"authorization": f"Bearer {WRITE_KEY}"}) as client:
            metrics = (await client.get(base_url + "/metrics")).text  # (an admin's: /metrics shows every key)
    key_id = KeyRing.from_settings(settings).authenticate(READ_KEY).key_id
    # The per-key token counters took the lines too.
    assert f'gateway_tokens_total{{key_id="{key_id}",kind="completion"}} 15.0' in metrics
    assert f'gateway_tokens_total{{key_id="{key_id}",kind="prompt"}} 15.0' in metrics


async def test_a_lines_own_priority_never_reaches_the_engine(jobs_settings, fake_engine):
    async with running_gateway(jobs_settings()) as (base_url, _):
        await jobs_ready(base_url)
        batch = await run_batch(base_url, [chat_line("jump", "fake-model", priority=-100)])
        assert batch.status == "completed"
    sent = [received.json for received in fake_engine.received if received.path == "/v1/chat/completions"]
    assert len(sent) == 1 and "priority" not in sent[0] and sent[0]["messages"][0]["content"] == "hi"


async def test_under_the_priority_scheduler_lines_carry_the_batch_bands_priority(jobs_settings, fake_engine):
    async with running_gateway(jobs_settings(engine_scheduling_policy="priority")) as (base_url, _):
        await jobs_ready(base_url)
        batch = await run_batch(base_url, [chat_line("jump", "fake-model", priority=-100)])
        assert batch.status == "completed"
    sent = [received for received in fake_engine.received if received.path == "/v1/chat/completions"]
    # As a live request carries it (vLLM reads the header before the body on every generating route);
    # interactive -1, standard 0, batch 1. The line's own -100 is gone.
    assert [received.headers.get("x-vllm-priority") for received in sent] == ["1"]
    assert "priority" not in sent[0].json


async def test_messages_lines_carry_the_batch_bands_priority_too(jobs_settings, fake_engine):
    async with running_gateway(jobs_settings(engine_scheduling_policy="priority")) as (base_url, _):
        await jobs_ready(base_url)
        async with anthropic.AsyncAnthropic(base_url=base_url, api_key=READ_KEY, max_retries=0) as client:
            batch = await client.messages.batches.create(requests=[
                {"custom_id": "m0", "params": {"model": "fake-model", "max_tokens": 8, "priority": -100,
                                               "messages": [{"role": "user", "content": "hi"}]}}])
            batch = await wait_status(lambda: client.messages.batches.retrieve(batch.id), ("ended",))
    sent = [received for received in fake_engine.received if received.path == "/v1/messages"]
    assert [received.headers.get("x-vllm-priority") for received in sent] == ["1"]
    assert "priority" not in sent[0].json


async def test_under_fcfs_no_line_carries_a_priority(jobs_settings, fake_engine):
    async with running_gateway(jobs_settings()) as (base_url, _):
        await jobs_ready(base_url)
        batch = await run_batch(base_url, [chat_line("plain", "fake-model")])
        assert batch.status == "completed"
    sent = [received for received in fake_engine.received if received.path == "/v1/chat/completions"]
    assert len(sent) == 1 and "x-vllm-priority" not in sent[0].headers and "priority" not in sent[0].json
