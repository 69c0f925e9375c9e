"""docs/batches.md's examples, run as written: the OpenAI batch (fake engine), the Messages batch (real
engine), and the webhook registration with curl and its verification with the SDK."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import re
import subprocess
import time

import orjson

from gateway.http.auth import KeyRing
from tests.gateway.batches.conftest import jobs_ready
from tests.support.docs import code_blocks, read_doc
from tests.support.engine_gateway import engine_settings
from tests.support.fake_engine import settings_for
from tests.support.gateway import READ_KEY, WRITE_KEY, running_gateway
from tests.support.webhook_receiver import receiving

PAGE = read_doc("batches.md")
[OPENAI_BATCH] = code_blocks(PAGE, "## An OpenAI batch with the SDK", "python")
[MESSAGES_BATCH] = code_blocks(PAGE, "## Anthropic Message Batches", "python")
[REGISTER] = code_blocks(PAGE, "## Webhooks", "bash")
[VERIFY] = code_blocks(PAGE, "## Webhooks", "python")


def wait_until_ended(get, timeout: float = 300.0):
    deadline = time.monotonic() + timeout
    while True:
        found = get()
        if getattr(found, "status", None) in ("completed", "failed", "cancelled", "expired") \
                or getattr(found, "processing_status", None) == "ended":
            return found
        assert time.monotonic() < deadline, f"not ended after {timeout}s"
        time.sleep(0.05)


def run(snippet: str, **names) -> str:
    """Run a snippet with ``names`` defined; what it printed."""
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        exec(snippet, {"wait_until_ended": wait_until_ended, **names})
    return output.getvalue()


def settings(fake_engine, tmp_path, **overrides):
    return settings_for(fake_engine, database_url=f"sqlite+aiosqlite:///{tmp_path}/gateway.db", session_store="off",
                        api_keys=[READ_KEY], admin_api_keys=[WRITE_KEY], batch_poll_seconds=0.1,
                        features=["none"], **overrides)


async def test_the_openai_batch_example(fake_engine, tmp_path):
    async with running_gateway(settings(fake_engine, tmp_path)) as (base_url, _):
        await jobs_ready(base_url)
        printed = await asyncio.to_thread(run, OPENAI_BATCH, BASE_URL=base_url, API_KEY=READ_KEY, MODEL="fake-model")
    assert printed.startswith("completed BatchRequestCounts(completed=3, failed=0, total=3)")
    assert printed.strip().endswith("['question-0', 'question-1', 'question-2']")
    assert len(fake_engine.received) == 3


async def test_the_messages_batch_example(idle_vllm_engine, tmp_path):
    engine = idle_vllm_engine
    async with running_gateway(engine_settings(engine, tmp_path, batch_poll_seconds=0.2)) as (base_url, _):
        await jobs_ready(base_url)
        printed = await asyncio.to_thread(run, MESSAGES_BATCH, BASE_URL=base_url, API_KEY=READ_KEY, MODEL=engine.model)
    # Each result prints "<custom_id> <type> <text>"; the model's text may hold newlines of its own, so the
    # results are found by their start, not by line.
    results = re.findall(r"^(greeting-\d) (\w+) ", printed, flags=re.MULTILINE)
    assert sorted(results) == [("greeting-0", "succeeded"), ("greeting-1", "succeeded")], printed


async def test_the_webhook_examples(fake_engine, tmp_path):
    gateway_settings = settings(fake_engine, tmp_path, webhook_allowed_networks=["127.0.0.0/8"])
    key_id = KeyRing.from_settings(gateway_settings).authenticate(READ_KEY).key_id
    async with receiving() as receiver, running_gateway(gateway_settings) as (base_url, _):
        await jobs_ready(base_url)
        env = os.environ | {"BASE_URL": base_url, "ADMIN_KEY": WRITE_KEY, "RECEIVER_URL": receiver.url,
                            "KEY_ID": key_id}
        answer = await asyncio.to_thread(subprocess.run, ["bash", "-c", REGISTER], env=env, capture_output=True,
                                         timeout=60, check=True)
        secret = orjson.loads(answer.stdout)["secret"]
        await asyncio.to_thread(run, OPENAI_BATCH, BASE_URL=base_url, API_KEY=READ_KEY, MODEL="fake-model")
        [delivery] = await receiver.wait_for(1, timeout=30)
    printed = run(VERIFY, SECRET=secret, BODY=delivery.body, HEADERS=delivery.headers)
    assert printed.split()[0] == "batch.completed" and printed.split()[1].startswith("batch_")
