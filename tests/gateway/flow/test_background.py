"""Background Responses go through flow control like every generating request, in front of the fake engine.

A background run waits its turn in its band (its key's, or the lower one ``x-priority`` asks
for), so it cannot skip ahead of interactive requests waiting; its POST answers once it was let
go, holds its grant for as long as the run runs, and leaves the queue if its client leaves.
The gateway is held at ``MAX_INFLIGHT=1`` by a request the fake engine never answers, so what
comes next waits; the order is read from what the engine received, never from timing.
"""

from __future__ import annotations

import asyncio

import httpx

from tests.gateway.flow.test_one_home import CHAT, DEADLINE, let_go
from tests.support.bodies import chat_body
from tests.support.gateway import READ_KEY, WRITE_KEY, bearer, running_gateway, serving
from tests.support.waiting import until

RESPONSES = "/v1/responses"


def background_body() -> dict:
    return {"model": "fake-model", "input": "hi", "background": True, "max_output_tokens": 4}


def gateway_settings(make_settings, **values):
    return make_settings(**{"api_keys": [READ_KEY], "admin_api_keys": [WRITE_KEY], "session_store": "memory",
                            "max_inflight": 1, **values})


async def hold_the_gateway(client: httpx.AsyncClient, fake_engine) -> asyncio.Task:
    """The gateway's one slot, taken by a chat the fake engine never answers (until it is cancelled)."""
    fake_engine.mode = "hang"
    held = asyncio.create_task(client.post(CHAT, json=chat_body(), headers=bearer(READ_KEY)))
    await until(lambda: len(fake_engine.received) == 1, DEADLINE, what="the engine holding the first request")
    fake_engine.mode = "ok"
    return held


async def queued(app, count: int, band: str | None = None) -> None:
    scheduler = app.state.gateway.relay.flow.scheduler

    def holds() -> bool:
        if band is None:
            return scheduler.queued() == count
        return sum(queue.bands[scheduler.bands.get(band).rank].size for queue in scheduler._queues.values()) == count

    await until(holds, DEADLINE, what=f"{count} requests queued ({band or 'any band'})")


async def test_a_background_run_waits_in_its_band_behind_interactive_requests(make_settings, fake_engine):
    async with serving(gateway_settings(make_settings)) as client:
        made = await client.post("/admin/keys", json={"name": "chat app", "priority": "interactive"},
                                 headers=bearer(WRITE_KEY))
        interactive = made.json()["key"]
        held = await hold_the_gateway(client, fake_engine)
        # The interactive key asks for the batch band for its background work.
        background = asyncio.create_task(client.post(RESPONSES, json=background_body(),
                                                     headers=bearer(interactive) | {"x-priority": "batch"}))
        await queued(client.app, 1, "batch")
        chat = asyncio.create_task(client.post(CHAT, json=chat_body(), headers=bearer(interactive)))
        await queued(client.app, 1, "interactive")
        await let_go(held)  # the slot frees: the interactive chat goes first, the background run when it ended
        answered, started = await asyncio.wait_for(asyncio.gather(chat, background), DEADLINE)
        caps = client.app.state.gateway.relay.flow.scheduler.caps
        await until(lambda: caps.held == 0, DEADLINE, what="the run's end giving its grant back")
    assert answered.status_code == 200
    assert started.status_code == 200, started.text
    assert started.json()["status"] in ("queued", "in_progress") and int(started.headers["x-queue-wait-ms"]) >= 0
    assert [received.path for received in fake_engine.received] == [CHAT, CHAT, RESPONSES]


async def test_a_background_run_holds_its_grant_while_it_runs(make_settings, fake_engine):
    fake_engine.hold = asyncio.Event()  # the engine's Responses stream waits before its first event
    async with serving(gateway_settings(make_settings, max_inflight_per_key=5)) as client:
        started = asyncio.create_task(client.post(RESPONSES, json=background_body(), headers=bearer(READ_KEY)))
        scheduler = client.app.state.gateway.relay.flow.scheduler
        await until(lambda: fake_engine.streams_started == 1, DEADLINE, what="the run's engine stream open")
        waiting = asyncio.create_task(client.post(CHAT, json=chat_body(), headers=bearer(READ_KEY)))
        await queued(client.app, 1)  # MAX_INFLIGHT=1: the run's grant holds the gateway's slot
        fake_engine.hold.set()
        answers = await asyncio.wait_for(asyncio.gather(started, waiting), DEADLINE)
        await until(lambda: scheduler.caps.held == 0, DEADLINE, what="every grant given back")
    assert [answer.status_code for answer in answers] == [200, 200]


async def test_a_client_leaving_while_its_background_run_is_queued_takes_it_out_of_the_queue(make_settings,
                                                                                            fake_engine):
    async with running_gateway(gateway_settings(make_settings)) as (base_url, app), \
            httpx.AsyncClient(base_url=base_url, timeout=DEADLINE) as client:
        held = await hold_the_gateway(client, fake_engine)
        background = asyncio.create_task(client.post(RESPONSES, json=background_body(), headers=bearer(READ_KEY)))
        await queued(app, 1)
        await let_go(background)  # the connection closes: the gateway notices while the run waits
        await queued(app, 0)
        await let_go(held)
        after = await client.post(CHAT, json=chat_body(), headers=bearer(READ_KEY))
    assert after.status_code == 200
    assert RESPONSES not in [received.path for received in fake_engine.received]


async def test_without_flow_control_a_background_run_at_the_cap_is_refused_at_once(make_settings, fake_engine):
    async with serving(gateway_settings(make_settings, flow_control=False, max_inflight=10,
                                        max_inflight_per_key=1)) as client:
        held = await hold_the_gateway(client, fake_engine)
        refused = await client.post(RESPONSES, json=background_body(), headers=bearer(READ_KEY))
        await let_go(held)
    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"


async def test_a_code_api_request_over_max_inflight_waits_its_turn_instead_of_a_429(make_settings, fake_engine):
    # /generate queues in flow control like /v1/completions; its route was still counted by the
    # middleware's in-flight caps, which refused it at once (429) while the gateway's slot was taken.
    async with serving(gateway_settings(make_settings)) as client:
        held = await hold_the_gateway(client, fake_engine)
        code = asyncio.create_task(client.post("/generate", json={"prompt": "def f():", "max_tokens": 4},
                                               headers=bearer(READ_KEY)))
        await queued(client.app, 1)
        await let_go(held)
        answered = await asyncio.wait_for(code, DEADLINE)
    assert answered.status_code == 200, answered.text
    assert [received.path for received in fake_engine.received] == [CHAT, "/v1/completions"]
