"""``response.*`` webhooks for background Responses, on the real engine with the official SDK.

A background run ends (its tokens run out: ``incomplete``; a cancel: ``cancelled``) and the
endpoint registered for the key receives the event, signed: the openai SDK's own verifier
checks it.
"""

from __future__ import annotations

import asyncio
import time

import openai

from tests.gateway.batches.conftest import admin, jobs_ready
from tests.gateway.batches.test_webhooks import key_id_of
from tests.support.engine_gateway import engine_settings
from tests.support.gateway import READ_KEY, WRITE_KEY, running_gateway
from tests.support.webhook_receiver import receiving

RUNNING = "vllm:num_requests_running"


async def until_running(engine, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while (await engine.ametrics()).get(RUNNING, 0) < 1:
        assert time.monotonic() < deadline, "the engine never ran the response"
        await asyncio.sleep(0.05)


async def test_background_responses_end_with_signed_response_events(idle_vllm_engine, tmp_path):
    engine = idle_vllm_engine
    settings = engine_settings(engine, tmp_path, session_store="memory", admin_api_keys=[WRITE_KEY],
                               webhook_allowed_networks=["127.0.0.0/8"], batch_poll_seconds=0.2)
    async with receiving() as receiver, running_gateway(settings) as (base_url, _):
        await jobs_ready(base_url)
        created = await admin(base_url, "POST", "/admin/webhooks", json={
            "url": receiver.url, "key_id": key_id_of(settings),
            "events": ["response.completed", "response.incomplete", "response.cancelled", "response.failed"]})
        assert created.status_code == 200, created.text
        verifier = openai.OpenAI(api_key="unused", webhook_secret=created.json()["secret"])
        async with openai.AsyncOpenAI(base_url=base_url + "/v1", api_key=READ_KEY, max_retries=0) as client:
            short = await client.responses.create(model=engine.model, input="Count.", max_output_tokens=8,
                                                  temperature=0, extra_body={"ignore_eos": True}, background=True)
            first = verifier.webhooks.unwrap((await receiver.wait_for(1, timeout=120))[0].body,
                                             receiver.deliveries[0].headers)
            assert (first.type, first.data.id) == ("response.incomplete", short.id)
            assert (await client.responses.retrieve(short.id)).status == "incomplete"

            long = await client.responses.create(model=engine.model, input="Count.", max_output_tokens=8000,
                                                 temperature=0, extra_body={"ignore_eos": True}, background=True)
            await until_running(engine)
            assert (await client.responses.cancel(long.id)).status == "cancelled"
            second = (await receiver.wait_for(2, timeout=120))[1]
            event = verifier.webhooks.unwrap(second.body, second.headers)
            assert (event.type, event.data.id) == ("response.cancelled", long.id)
            assert second.headers["webhook-id"] == event.id != first.id
