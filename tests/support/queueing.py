"""Driving the flow-control queue through the whole app in front of the fake engine (tests/support/fake_engine).

Hold the gateway's one in-flight slot with a request the engine never answers, wait until some
requests queue behind it, let a request go: what the flow and limits tests share.
"""

from __future__ import annotations

import asyncio

from tests.support.bodies import chat_body
from tests.support.gateway import WRITE_KEY, bearer
from tests.support.waiting import until

CHAT = "/v1/chat/completions"
DEADLINE = 20.0  # a hang guard, not a measurement


async def new_key(client, **body) -> str:
    """A database key made through the admin API (``body``: its fields, e.g. ``limits``); its secret."""
    answer = await client.post("/admin/keys", json={"name": "app", **body}, headers=bearer(WRITE_KEY))
    assert answer.status_code == 201, answer.text
    return answer.json()["key"]


async def hold_one(client, fake_engine, key: str) -> asyncio.Task:
    """A request of ``key`` the fake engine never answers (until it is cancelled): with MAX_INFLIGHT=1
    the gateway's slot is then full."""
    fake_engine.mode = "hang"
    held = asyncio.create_task(client.post(CHAT, json=chat_body(), headers=bearer(key)))
    await until(lambda: len(fake_engine.received) == 1, DEADLINE, what="the engine holding the first request")
    fake_engine.mode = "ok"
    return held


async def queued(client, count: int) -> None:
    """Until exactly ``count`` requests wait in the flow-control queue."""
    scheduler = client.app.state.gateway.relay.flow.scheduler
    await until(lambda: scheduler.queued() == count, DEADLINE, what=f"{count} requests queued")


async def let_go(task: asyncio.Task) -> None:
    """The request's client leaves (its task is cancelled and awaited)."""
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
