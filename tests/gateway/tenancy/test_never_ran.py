"""A request that never runs keeps nothing of its key's limits, in process and on Redis alike.

Admitted under its key's limits before the flow-control queue (so a request over its rate is
refused at once, never after a wait), a request that then leaves without running (its client
gone while it waited, the queue full or timed out, no engine to be reached) gives back its
request in ``rpm``, its reserved tokens and its concurrency slot, and leaves no ledger row.
Through the whole app in front of the fake engine; the gateway's one in-flight slot is held by
a request the engine never answers, so the key's requests wait in the queue.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.support.bodies import chat_body, stream_body
from tests.support.fake_engine import running_fake_engine, settings_for
from tests.support.gateway import READ_KEY, WRITE_KEY, bearer, serving
from tests.support.queueing import hold_one, let_go, new_key, queued
from tests.support.waiting import until

CHAT = "/v1/chat/completions"
DEADLINE = 20.0
ADMIN = bearer(WRITE_KEY)
LIMITERS = ["local", pytest.param("redis", marks=[pytest.mark.integration, pytest.mark.redis])]


@pytest.fixture(params=LIMITERS)
def limiter_settings(request) -> dict:
    return {"redis_url": request.getfixturevalue("redis_url")} if request.param == "redis" else {}


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
async def test_requests_that_left_the_queue_or_were_refused_by_it_keep_nothing_of_the_keys_limits(
        make_settings, fake_engine, limiter_settings, stream):
    settings = make_settings(api_keys=[READ_KEY], admin_api_keys=[WRITE_KEY], usage_flush_seconds=300, max_inflight=1,
                             flow_queue_max_per_key=1, **limiter_settings)
    body = stream_body(max_tokens=4) if stream else chat_body()
    limits = {"rpm": 2, "tpm": 10_000}
    async with serving(settings) as client:
        key, untouched = await new_key(client, limits=limits), await new_key(client, limits=limits)
        held = await hold_one(client, fake_engine, READ_KEY)
        waiting = asyncio.create_task(client.post(CHAT, json=body, headers=bearer(key)))
        await queued(client, 1)
        refused = await client.post(CHAT, json=body, headers=bearer(key))  # the key's queue is full
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "key_queue_full"
        await let_go(waiting)  # its client leaves while it waits
        await queued(client, 0)
        await let_go(held)

        first = await client.post(CHAT, json=body, headers=bearer(key))
        second = await client.post(CHAT, json=body, headers=bearer(key))
        third = await client.post(CHAT, json=body, headers=bearer(key))
        reference = await client.post(CHAT, json=body, headers=bearer(untouched))  # same limits, nothing before
        await client.app.state.tenancy.ledger.flush()
        usage = (await client.get("/v1/usage?group_by=route", headers=bearer(key))).json()["data"]
    assert [first.status_code, second.status_code, third.status_code] == [200, 200, 429]  # rpm 2: both came back
    assert third.json()["error"]["code"] == "rate_limit_exceeded"
    assert first.headers["x-ratelimit-remaining-requests"] == reference.headers["x-ratelimit-remaining-requests"] \
        == "1"
    # The tokens reserved by the two that never ran were given back: the key's first success finds
    # as many tokens left as a key with nothing before it.
    assert first.headers["x-ratelimit-remaining-tokens"] == reference.headers["x-ratelimit-remaining-tokens"]
    assert [row["requests"] for row in usage] == [2]  # only the two that ran are in the ledger
    assert len(fake_engine.received) == 1 + 2 + 1  # the held one, the key's two, the reference


async def test_a_request_no_engine_could_take_gives_back_its_request(make_settings, limiter_settings):
    """The engine stops answering connections once the gateway knows its model: each request is a 503,
    and the key's rpm of 1 still lets the next one try (none of them ran)."""
    async with running_fake_engine() as engine:
        settings = settings_for(engine, database_url=make_settings().database_url, session_store="off",
                                api_keys=[READ_KEY], admin_api_keys=[WRITE_KEY], usage_flush_seconds=300,
                                **limiter_settings)
        async with serving(settings) as client:
            key = await new_key(client, limits={"rpm": 1})
            await engine.stop()  # (its port now refuses connections)
            answers = [await client.post(CHAT, json=body, headers=bearer(key))
                       for body in (chat_body(), stream_body(), chat_body(), stream_body())]
    assert [answer.status_code for answer in answers] == [503, 503, 503, 503]
    assert all(answer.json()["error"]["code"] != "rate_limit_exceeded" for answer in answers)


@pytest.mark.integration
@pytest.mark.redis
async def test_with_redis_a_request_that_left_the_queue_frees_its_concurrency_slot_on_every_replica(
        make_settings, fake_engine, redis_url):
    """With REDIS_URL the limiter holds max_concurrency (across replicas) while a request waits in the
    queue; its client leaving frees it at once (no lease to wait out)."""
    settings = make_settings(api_keys=[READ_KEY], admin_api_keys=[WRITE_KEY], usage_flush_seconds=300, max_inflight=1,
                             redis_url=redis_url)
    async with serving(settings) as a, serving(settings) as b:
        key = await new_key(a, limits={"max_concurrency": 1})
        held = await hold_one(a, fake_engine, READ_KEY)
        waiting = asyncio.create_task(a.post(CHAT, json=chat_body(), headers=bearer(key)))
        await queued(a, 1)
        busy = await b.post(CHAT, json=chat_body(), headers=bearer(key))
        await let_go(waiting)
        await queued(a, 0)
        free = await b.post(CHAT, json=chat_body(), headers=bearer(key))
        await let_go(held)
    assert busy.status_code == 429 and "in flight" in busy.json()["error"]["message"]
    assert free.status_code == 200

