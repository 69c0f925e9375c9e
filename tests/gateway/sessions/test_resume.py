"""Drop and resume against the real engine: nothing lost, nothing repeated, one [DONE]."""

from __future__ import annotations

import asyncio
import os
import random
import time

import openai
import pytest

from tests.support.engine_gateway import engine_chat_body, engine_session_settings
from tests.support.gateway import running_gateway
from tests.support.sse_client import content_of, fresh_client, read_stream

pytestmark = [pytest.mark.integration, pytest.mark.engine]

# The drops and resumes follow this seed: the same on every run, so a failure can be run again
# as it happened; STACK_TEST_RESUME_SEED=N explores other sequences.
RESUME_SEED = int(os.environ.get("STACK_TEST_RESUME_SEED", "20261130"))


async def uninterrupted(base: str, engine, max_tokens: int, **extra) -> str:
    async with fresh_client(base) as client:
        got = await read_stream(client, "POST", "/v1/chat/completions", json=engine_chat_body(engine, max_tokens, **extra))
    assert got.status == 200 and got.dones == 1
    return got.content


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_random_drops_and_resumes_equal_one_uninterrupted_run(idle_vllm_engine, tmp_path, store):
    engine = idle_vllm_engine  # alone on the engine: greedy decoding is then exactly reproducible
    seed = RESUME_SEED
    rng = random.Random(seed)
    settings = engine_session_settings(engine, session_store=store, database_url=f"sqlite:///{tmp_path}/s.db")
    async with running_gateway(settings) as (base, app), fresh_client(base) as client:
        reference = await uninterrupted(base, engine, 2000)
        body = engine_chat_body(engine, 2000, session_id="drops-1")
        events, connections, resumed_live, trace = [], 0, 0, []
        while not (events and events[-1].done):
            way = rng.choice(["post", "get-header", "get-query"]) if events else "post"
            headers, url, method = {}, "/v1/chat/completions", "POST"
            if events and way == "post":
                headers = {"Last-Event-ID": events[-1].id}
            elif way == "get-header":
                method, url, headers = "GET", "/v1/sessions/drops-1/events", {"Last-Event-ID": events[-1].id}
            elif way == "get-query":
                method, url = "GET", f"/v1/sessions/drops-1/events?last_event_id={events[-1].id}"
            session = app.state.sessions.local("local", "drops-1")
            resumed_live += bool(events and session is not None and session.live)
            trace.append((round(time.monotonic(), 2), len(events), session.log.next_index if session else None))
            # Each stream has its own connection; leaving it early is a real disconnect.
            # Short reads first, so several resumes land while the engine is still generating.
            longest = 8 if connections < 6 else 60
            got = await read_stream(client, method, url, json=body if method == "POST" else None,
                                    headers=headers, stop_after=rng.randint(1, longest))
            assert got.status == 200, (seed, got.body)
            assert got.events, (seed, "a resume before the end delivered no event")  # (and the loop ends)
            events += got.events
            connections += 1
    assert [e.index for e in events] == list(range(len(events))), seed  # contiguous, no duplicates
    assert sum(e.done for e in events) == 1, seed
    assert events[-2].json["choices"][0]["finish_reason"] == "length", (seed, events[-2].data)
    assert content_of(events) == reference, seed
    assert connections >= 8, seed
    assert resumed_live >= 1, (seed, trace)  # a resume caught the generation live, not only its replay


async def test_openai_sdk_streams_through_sessions_and_resumes_by_counting_chunks(vllm_engine):
    async with running_gateway(engine_session_settings(vllm_engine, session_store="memory")) as (base, app):
        sdk = openai.AsyncOpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
        reference = await uninterrupted(base, vllm_engine, 120)
        kwargs = dict(model=vllm_engine.model, messages=[{"role": "user", "content": "Tell me a long story about a lighthouse."}],
                      max_tokens=120, temperature=0, stream=True, extra_body={"ignore_eos": True, "session_id": "sdk-1"})
        stream = await sdk.chat.completions.create(**kwargs)
        first = []
        async for chunk in stream:
            first.append(chunk)
            if len(first) == 10:
                break
        await stream.close()
        # The SDK ignores `id:` lines, but events are numbered from 0 in order: 10 chunks -> last id 9.
        rest = [chunk async for chunk in await sdk.chat.completions.create(
            **kwargs, extra_headers={"Last-Event-ID": "sdk-1:9"})]
        await sdk.close()
    text = "".join(c.choices[0].delta.content or "" for c in first + rest if c.choices)
    assert text == reference
    assert rest[-1].choices[0].finish_reason == "length"
    assert len({c.id for c in first + rest}) == 1  # one generation, seamlessly


async def test_twenty_sessions_with_their_own_resumes_do_not_cross(vllm_engine, tmp_path):
    settings = engine_session_settings(vllm_engine, session_store="sqlite", database_url=f"sqlite:///{tmp_path}/s.db")
    async with running_gateway(settings) as (base, app):

        async def follow(n: int) -> tuple[list, list]:
            rng = random.Random(n)
            sid = f"crowd-{n}"
            body = engine_chat_body(vllm_engine, 80, prompt=f"Story number {n}: begin.", session_id=sid)
            events = []
            while not (events and events[-1].done):
                headers = {"Last-Event-ID": events[-1].id} if events else {}
                got = await read_stream(client, "POST", "/v1/chat/completions", json=body, headers=headers,
                                        stop_after=rng.randint(5, 30))
                assert got.status == 200, got.body
                assert got.events, "a resume before the end delivered no event"  # (and the loop ends)
                events += got.events
            full = await read_stream(client, "GET", f"/v1/sessions/{sid}/events")
            return events, full.events

        async with fresh_client(base) as client:
            results = await asyncio.gather(*(follow(n) for n in range(20)))
    completion_ids = set()
    for n, (events, full) in enumerate(results):
        assert [e.id for e in events] == [f"crowd-{n}:{i}" for i in range(len(events))]
        assert [e.data for e in events] == [e.data for e in full]  # what the client pieced together = the log
        ids = {e.json["id"] for e in events if not e.done}
        assert len(ids) == 1  # every chunk from this session's own generation
        completion_ids |= ids
        assert sum(e.done for e in events) == 1
        assert events[-2].json["choices"][0]["finish_reason"] == "length"
    assert len(completion_ids) == 20
