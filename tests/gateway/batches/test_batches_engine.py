"""Batches on the real vLLM engine with the official SDKs: complete, Messages, a killed gateway, a second replica.

"Exactly once" is counted at the engine: ``vllm:request_success_total`` grows by the number of
lines, however often the gateway running them died (a run cut with its gateway is aborted by
vLLM when the connection drops, so it does not count as a success).
"""

from __future__ import annotations

import asyncio
import io
import signal
import time

import anthropic
import openai
import orjson
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from tests.gateway.batches.conftest import jobs_ready, wait_status
from tests.gateway.batches.test_request_path import own_usage
from tests.support.engine_gateway import engine_settings
from tests.support.gateway import READ_KEY, running_gateway
from tests.support.gateway_process import GatewayProcess

SUCCESS = "vllm:request_success_total"


def lines(engine, count: int, max_tokens: int) -> bytes:
    return b"".join(orjson.dumps({
        "custom_id": f"line-{n}", "method": "POST", "url": "/v1/chat/completions",
        "body": {"model": engine.model, "messages": [{"role": "user", "content": f"Count to {n}."}],
                 "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}}) + b"\n" for n in range(count))


async def submit(base_url: str, engine, count: int, max_tokens: int) -> str:
    async with openai.AsyncOpenAI(base_url=base_url + "/v1", api_key=READ_KEY, max_retries=0) as client:
        file = await client.files.create(file=("in.jsonl", io.BytesIO(lines(engine, count, max_tokens))),
                                         purpose="batch")
        return (await client.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions",
                                            completion_window="24h")).id


async def finished(base_url: str, batch_id: str, timeout: float) -> tuple[object, list[dict]]:
    async with openai.AsyncOpenAI(base_url=base_url + "/v1", api_key=READ_KEY, max_retries=0) as client:
        batch = await wait_status(lambda: client.batches.retrieve(batch_id), ("completed", "failed"), timeout)
        assert batch.status == "completed", batch
        content = (await client.files.content(batch.output_file_id)).content
        return batch, [orjson.loads(line) for line in content.splitlines()]


async def progress(base_url: str, batch_id: str, done: int, timeout: float) -> None:
    """Wait until at least ``done`` lines are done (and the batch still runs)."""
    async with openai.AsyncOpenAI(base_url=base_url + "/v1", api_key=READ_KEY, max_retries=0) as client:
        deadline = time.monotonic() + timeout
        while True:
            batch = await client.batches.retrieve(batch_id)
            if batch.request_counts and batch.request_counts.completed >= done:
                assert batch.status == "in_progress", batch.status
                return
            assert time.monotonic() < deadline, f"{batch.request_counts} after {timeout}s"
            await asyncio.sleep(0.05)


def check_output(output: list[dict], count: int, max_tokens: int) -> None:
    assert sorted(line["custom_id"] for line in output) == sorted(f"line-{n}" for n in range(count))
    for line in output:
        assert line["response"]["status_code"] == 200
        assert line["response"]["body"]["usage"]["completion_tokens"] == max_tokens


async def check_engine_runs(engine, before: float, count: int, slots: int) -> None:
    """Every line ran once, but for lines that were running when their gateway died (at most its
    ``slots``, BATCH_CONCURRENCY): those run again. Such a line may also have finished inside the
    engine in the instant between its last token and its recorded result, so the engine counts both
    of its runs. (Each line's result is in the output exactly once: ``check_output``. The lines
    table, which counted each line's attempts, holds nothing of a batch once it ended.)"""
    assert count <= (await engine.ametrics()).get(SUCCESS, 0) - before <= count + slots


async def test_a_50_line_chat_batch_completes(idle_vllm_engine, tmp_path):
    engine = idle_vllm_engine
    before = (await engine.ametrics()).get(SUCCESS, 0)
    settings = engine_settings(engine, tmp_path, batch_poll_seconds=0.2, usage_flush_seconds=0.2)
    async with running_gateway(settings) as (base_url, _):
        await jobs_ready(base_url)
        batch_id = await submit(base_url, engine, 50, 4)
        batch, output = await finished(base_url, batch_id, 300)
        usage = await own_usage(base_url, READ_KEY, until_requests=50)
    assert batch.request_counts.model_dump() == {"total": 50, "completed": 50, "failed": 0}
    check_output(output, 50, 4)
    # Billed to the batch's key, on the batch route, as the engine counted them.
    prompt = sum(line["response"]["body"]["usage"]["prompt_tokens"] for line in output)
    assert [(row["route"], row["requests"], row["prompt_tokens"], row["completion_tokens"]) for row in usage] == \
        [("batch:/v1/chat/completions", 50, prompt, 50 * 4)]
    assert (await engine.ametrics()).get(SUCCESS, 0) - before == 50


async def test_a_messages_batch_with_the_anthropic_sdk(idle_vllm_engine, tmp_path):
    engine = idle_vllm_engine
    async with running_gateway(engine_settings(engine, tmp_path, batch_poll_seconds=0.2)) as (base_url, _):
        await jobs_ready(base_url)
        async with anthropic.AsyncAnthropic(base_url=base_url, api_key=READ_KEY, max_retries=0) as client:
            batch = await client.messages.batches.create(requests=[
                {"custom_id": f"m{n}", "params": {"model": engine.model, "max_tokens": 4,
                                                 "messages": [{"role": "user", "content": f"Say {n}."}]}}
                for n in range(4)])
            batch = await wait_status(lambda: client.messages.batches.retrieve(batch.id), ("ended",), 300)
            assert batch.request_counts.succeeded == 4 and batch.ended_at is not None
            results = {item.custom_id: item.result async for item in await client.messages.batches.results(batch.id)}
    assert sorted(results) == ["m0", "m1", "m2", "m3"]
    for result in results.values():
        assert result.type == "succeeded" and result.message.role == "assistant" and result.message.content


async def test_a_gateway_killed_mid_batch_restarts_and_runs_every_line_once(idle_vllm_engine, tmp_path):
    engine = idle_vllm_engine
    env = {"API_KEYS": READ_KEY, "DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/gateway.db",
           "SESSION_STORE": "off", "FEATURES": "none", "BATCH_LEASE_SECONDS": "2", "BATCH_POLL_SECONDS": "0.2",
           "BATCH_CONCURRENCY": "4"}
    count, max_tokens = 16, 48
    before = (await engine.ametrics()).get(SUCCESS, 0)
    first = await GatewayProcess(engine, tmp_path / "first.log", **env).start()
    try:
        await jobs_ready(first.base_url)
        batch_id = await submit(first.base_url, engine, count, max_tokens)
        await progress(first.base_url, batch_id, 4, 300)
    finally:
        await first.stop(signal.SIGKILL)
    second = await GatewayProcess(engine, tmp_path / "second.log", **env).start()
    try:
        await jobs_ready(second.base_url)
        batch, output = await finished(second.base_url, batch_id, 300)
    finally:
        await second.stop()
    assert batch.request_counts.model_dump() == {"total": count, "completed": count, "failed": 0}
    check_output(output, count, max_tokens)
    await check_engine_runs(engine, before, count, int(env["BATCH_CONCURRENCY"]))


async def test_a_second_replica_takes_over_a_batch_whose_replica_died(idle_vllm_engine, postgres_database_url,
                                                                      tmp_path):
    engine = idle_vllm_engine
    # Replicas share KEY_ID_SECRET (docs/batches.md): the owner of a batch is the same key id on both.
    env = {"API_KEYS": READ_KEY, "DATABASE_URL": postgres_database_url, "SESSION_STORE": "off", "FEATURES": "none",
           "KEY_ID_SECRET": "replicas-share-this-secret-0123",
           "BATCH_LEASE_SECONDS": "2", "BATCH_POLL_SECONDS": "0.2", "BATCH_CONCURRENCY": "4"}
    count, max_tokens = 16, 48
    before = (await engine.ametrics()).get(SUCCESS, 0)
    first = await GatewayProcess(engine, tmp_path / "first.log", **env).start()
    second = None
    try:
        await jobs_ready(first.base_url)
        batch_id = await submit(first.base_url, engine, count, max_tokens)
        await progress(first.base_url, batch_id, 4, 300)
        second = await GatewayProcess(engine, tmp_path / "second.log", **env).start()
        await jobs_ready(second.base_url)
        await first.stop(signal.SIGKILL)
        batch, output = await finished(second.base_url, batch_id, 300)
    finally:
        await first.stop(signal.SIGKILL)
        if second is not None:
            await second.stop()
    assert batch.request_counts.model_dump() == {"total": count, "completed": count, "failed": 0}
    check_output(output, count, max_tokens)
    await check_engine_runs(engine, before, count, int(env["BATCH_CONCURRENCY"]))
