"""Two gateway replicas sharing a real Redis and a real PostgreSQL, in front of the real vLLM engine.

What an ops team relies on: a key's rpm holds exactly across replicas; a budget cuts a stream
mid-way as the official ``openai`` and ``anthropic`` SDKs see it, and the next request is a
``RateLimitError`` carrying the rate-limit headers; a revocation made through one replica is
refused by the other within a second; the ledger's totals equal the usage every client
received and what the engine counted itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import anthropic
import httpx
import openai
import pytest

from tests.support.engine_gateway import engine_settings
from tests.support.gateway import READ_KEY, WRITE_KEY, bearer, running_gateway
from tests.support.waiting import until

pytestmark = [pytest.mark.integration, pytest.mark.engine, pytest.mark.postgres, pytest.mark.redis]

ADMIN = bearer(WRITE_KEY)
PROMPT_TOKENS = "vllm:prompt_tokens_total"
GENERATED = "vllm:generation_tokens_total"


@contextlib.asynccontextmanager
async def two_replicas(engine, tmp_path, database_url: str, redis_url: str):
    """Replicas A and B (each its own app under uvicorn: its own limiter, key cache, ledger), one Redis, one database."""
    settings = engine_settings(engine, tmp_path, database_url=database_url, redis_url=redis_url,
                               admin_api_keys=[WRITE_KEY], api_keys=[READ_KEY], usage_flush_seconds=0.2,
                               access_log=False, engine_poll_interval=60)
    async with running_gateway(settings) as (a_url, a_app), running_gateway(settings) as (b_url, b_app), \
            httpx.AsyncClient(base_url=a_url, timeout=120) as a, httpx.AsyncClient(base_url=b_url, timeout=120) as b:
        yield (a_app, a), (b_app, b)


async def new_key(client: httpx.AsyncClient, **body) -> dict:
    answer = await client.post("/admin/keys", json={"name": "k", **body}, headers=ADMIN)
    assert answer.status_code == 201, answer.text
    return answer.json()


def url(client: httpx.AsyncClient, path: str = "") -> str:
    return str(client.base_url).rstrip("/") + path


def short_chat(engine, max_tokens: int = 1, **extra) -> dict:
    return {"model": engine.model, "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": max_tokens,
            "temperature": 0, **extra}


async def test_rpm_10_gives_exactly_10_successes_across_two_replicas(idle_vllm_engine, tmp_path,
                                                                      postgres_database_url, redis_url):
    engine = idle_vllm_engine
    async with two_replicas(engine, tmp_path, postgres_database_url, redis_url) as ((_, a), (_, b)):
        key = (await new_key(a, limits={"rpm": 10}))["key"]
        for replica in (a, b):  # (each replica knows the key before the burst: only the limit is tested)
            assert (await replica.get("/v1/models", headers=bearer(key))).status_code == 200
        answers = await asyncio.gather(*(
            (a if i % 2 else b).post("/v1/chat/completions", json=short_chat(engine), headers=bearer(key))
            for i in range(30)))
    statuses = sorted(answer.status_code for answer in answers)
    assert statuses == [200] * 10 + [429] * 20, [answer.text for answer in answers if answer.status_code != 429]
    assert statuses == [200] * 10 + [429] * 20
    refused = next(answer for answer in answers if answer.status_code == 429)
    assert refused.headers["x-ratelimit-limit-requests"] == "10"
    assert refused.headers["x-ratelimit-remaining-requests"] == "0" and int(refused.headers["retry-after"]) >= 1


async def test_a_budget_cuts_a_stream_as_both_sdks_see_it_and_then_refuses(idle_vllm_engine, tmp_path,
                                                                           postgres_database_url, redis_url):
    engine = idle_vllm_engine
    async with two_replicas(engine, tmp_path, postgres_database_url, redis_url) as ((_, a), (_, b)):
        limits = {"rpm": 1000, "budget_tokens": 120, "budget_period": "day"}
        oai_key = (await new_key(a, limits=limits))["key"]
        ant_key = (await new_key(a, limits=limits))["key"]
        # OpenAI's SDK, through replica A: the stream's error chunk is an APIError, after some content.
        sdk = openai.AsyncOpenAI(base_url=url(a, "/v1"), api_key=oai_key, max_retries=0)
        received = []
        with pytest.raises(openai.APIError) as cut:
            stream = await sdk.chat.completions.create(
                model=engine.model, messages=[{"role": "user", "content": "Tell me a long story."}], max_tokens=400,
                temperature=0, stream=True, extra_body={"ignore_eos": True})
            async for chunk in stream:
                received += [choice.delta.content for choice in chunk.choices if choice.delta.content]
        assert "budget" in cut.value.message and 0 < len(received) < 400
        # The next request, through replica B: a RateLimitError carrying the headers.
        sdk_b = openai.AsyncOpenAI(base_url=url(b, "/v1"), api_key=oai_key, max_retries=0)
        with pytest.raises(openai.RateLimitError) as refused:
            await sdk_b.chat.completions.create(model=engine.model, messages=[{"role": "user", "content": "hi"}],
                                                max_tokens=5)
        headers = refused.value.response.headers
        assert headers["x-gateway-budget-limit"] == "120" and int(headers["x-gateway-budget-remaining"]) < 40
        assert "retry-after" in headers and refused.value.code == "insufficient_quota"
        # Anthropic's SDK (x-api-key), through replica B: the error event, then a RateLimitError.
        claude = anthropic.AsyncAnthropic(base_url=url(b), api_key=ant_key, max_retries=0)
        with pytest.raises(anthropic.APIStatusError) as cut:
            # Greedy: a sampled answer of the embedded model may end on its own before the budget does.
            async with claude.messages.stream(model=engine.model, max_tokens=400, messages=[
                    {"role": "user", "content": "Tell me a long story."}],
                    extra_body={"ignore_eos": True, "temperature": 0}) as stream:
                async for _ in stream.text_stream:
                    pass
        assert "budget" in str(cut.value)
        claude_a = anthropic.AsyncAnthropic(base_url=url(a), api_key=ant_key, max_retries=0)
        with pytest.raises(anthropic.RateLimitError) as refused:
            await claude_a.messages.create(model=engine.model, max_tokens=5,
                                           messages=[{"role": "user", "content": "hi"}])
        headers = refused.value.response.headers
        assert headers["x-gateway-budget-limit"] == "120" and "retry-after" in headers
        assert "x-ratelimit-limit-requests" not in headers  # (Anthropic's family: its own headers)
        assert refused.value.body["error"]["type"] == "rate_limit_error"
        # A successful answer carries Anthropic's rate-limit headers too.
        rpm_key = (await new_key(a, limits={"rpm": 1000}))["key"]
        raw = await anthropic.AsyncAnthropic(base_url=url(a), api_key=rpm_key, max_retries=0).messages \
            .with_raw_response.create(model=engine.model, max_tokens=1, messages=[{"role": "user", "content": "hi"}])
        assert raw.headers["anthropic-ratelimit-requests-limit"] == "1000"
        assert int(raw.headers["anthropic-ratelimit-requests-remaining"]) == 999


async def test_a_key_revoked_through_one_replica_is_refused_by_the_other_within_a_second(
        idle_vllm_engine, tmp_path, postgres_database_url, redis_url):
    engine = idle_vllm_engine
    async with two_replicas(engine, tmp_path, postgres_database_url, redis_url) as ((_, a), (_, b)):
        created = await new_key(a)
        assert (await b.get("/v1/models", headers=bearer(created["key"]))).status_code == 200  # B has it cached
        assert (await a.delete(f"/admin/keys/{created['id']}", headers=ADMIN)).status_code == 200
        revoked_at = time.monotonic()
        statuses = []
        while time.monotonic() - revoked_at < 1.0:
            statuses.append((await b.get("/v1/models", headers=bearer(created["key"]))).status_code)
            if statuses[-1] == 401:
                break
        assert statuses[-1] == 401, f"replica B still accepted the revoked key after 1 s: {statuses}"
        assert (await a.get("/v1/models", headers=bearer(created["key"]))).status_code == 401


async def test_the_ledger_equals_what_clients_received_and_what_the_engine_counted(
        idle_vllm_engine, tmp_path, postgres_database_url, redis_url):
    engine = idle_vllm_engine
    async with two_replicas(engine, tmp_path, postgres_database_url, redis_url) as ((_, a), (_, b)):
        created = await new_key(a, limits={"tpm": 1_000_000})
        key = bearer(created["key"])
        before = await engine.ametrics()
        received = []  # (prompt, completion) of every answer, as the client read it
        answer = (await a.post("/v1/chat/completions", json=short_chat(engine, 6), headers=key)).json()
        received.append((answer["usage"]["prompt_tokens"], answer["usage"]["completion_tokens"]))
        answer = (await b.post("/v1/completions", headers=key, json={
            "model": engine.model, "prompt": "Once upon a time", "max_tokens": 5, "temperature": 0})).json()
        received.append((answer["usage"]["prompt_tokens"], answer["usage"]["completion_tokens"]))
        sdk = openai.AsyncOpenAI(base_url=url(b, "/v1"), api_key=created["key"], max_retries=0)
        stream = await sdk.chat.completions.create(stream=True, stream_options={"include_usage": True},
                                                   **short_chat(engine, 7))
        usage = [chunk.usage async for chunk in stream if chunk.usage is not None][-1]
        received.append((usage.prompt_tokens, usage.completion_tokens))
        claude = anthropic.AsyncAnthropic(base_url=url(a), api_key=created["key"],
                                          max_retries=0)
        message = await claude.messages.create(model=engine.model, max_tokens=4,
                                               messages=[{"role": "user", "content": "Say hi."}])
        received.append((message.usage.input_tokens, message.usage.output_tokens))
        response = (await a.post("/v1/responses", headers=key, json={
            "model": engine.model, "input": "Say hi.", "max_output_tokens": 16, "temperature": 0})).json()
        received.append((response["usage"]["input_tokens"], response["usage"]["output_tokens"]))
        await engine.wait_until_idle()
        after = await engine.ametrics()

        async def reported() -> dict | None:  # each replica writes its rows every 0.2 s
            answer = await b.get(f"/admin/usage?group_by=key&key_id={created['id']}", headers=ADMIN)
            rows = answer.json()["data"]
            return rows[0] if rows and rows[0]["requests"] == len(received) else None

        await until(reported, timeout=30, interval=0.2, what="every request in the ledger")
        row = await reported()
        own = (await a.get("/v1/usage?group_by=route", headers=key)).json()
    assert row["requests"] == len(received)
    assert row["prompt_tokens"] == sum(prompt for prompt, _ in received)
    assert row["completion_tokens"] == sum(completion for _, completion in received)
    assert row["completion_tokens"] == after[GENERATED] - before[GENERATED]
    assert row["prompt_tokens"] == after[PROMPT_TOKENS] - before[PROMPT_TOKENS]
    routes = {entry["route"] for entry in own["data"]}
    assert routes == {"/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/responses"}
