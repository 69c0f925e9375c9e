"""A session store that stops answering (PostgreSQL frozen with SIGSTOP) is a store that is down.

A partitioned or wedged database does not refuse anything: connections stay open and every
query waits. Before every store call was bounded (``SESSION_STORE_TIMEOUT_SECONDS``), a named
session, a resume, a cancel and a Responses lookup waited forever (issue 29, finding 4). Now
each answers 503 with ``Retry-After`` once the bound has passed, while everything that does not
need the store (an unnamed stream, ``/health``) goes on; once the database answers again, named
sessions work again without a restart.

Two gateway replicas run under uvicorn in front of the fake engine (the second one knows the
first one's session only from the store); sessions and stored responses are on a PostgreSQL
cluster of the test's own (``stoppable_postgres``), which the test freezes.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from gateway.sessions.store.bounded import Bounded, StoreTimeout
from tests.support.fake_engine import settings_for
from tests.support.gateway import running_gateway
from tests.support.sse_client import fresh_client, read_stream
from tests.support.waiting import until

BOUND = 1.0       # SESSION_STORE_TIMEOUT_SECONDS here
DEADLINE = 30.0   # only so that a request that hangs fails the test instead of hanging it
CHAT = "/v1/chat/completions"


def chat(tokens: int = 4, **extra) -> dict:
    return {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "stream": True,
            "max_tokens": tokens, **extra}


def refused(answer: httpx.Response | object) -> bool:
    status = getattr(answer, "status_code", getattr(answer, "status", None))
    headers = answer.headers
    return status == 503 and headers.get("retry-after") is not None


async def within_deadline(work):
    async with asyncio.timeout(DEADLINE):
        return await work


@pytest.mark.integration
@pytest.mark.postgres
async def test_a_frozen_postgres_gives_503s_in_bounded_time_and_the_rest_keeps_serving(
        stoppable_postgres, fake_engine, tmp_path):
    url = stoppable_postgres.server.database_url("postgres")
    settings = settings_for(fake_engine, database_url=f"sqlite+aiosqlite:///{tmp_path}/gw.db",
                            sessions_database_url=url, session_store="postgres",
                            session_store_timeout_seconds=BOUND, sse_keepalive_seconds=5)
    async with running_gateway(settings) as (base, _app), fresh_client(base) as client, \
            running_gateway(settings) as (other_base, _other), fresh_client(other_base) as other:
        kept = await read_stream(client, "POST", CHAT, json=chat(session_id="kept"))
        assert kept.status == 200 and kept.dones == 1
        stored = await read_stream(client, "POST", "/v1/responses",
                                   json={"model": "fake-model", "input": "hi", "stream": True})
        assert stored.status == 200
        response_id = next(e.json["response"]["id"] for e in stored.events if e.json and "response" in e.json)
        await until(lambda: _persisted(other, "kept"), 20, what="the session persisted", interval=0.1)

        stoppable_postgres.freeze()
        try:
            named = await within_deadline(read_stream(client, "POST", CHAT, json=chat(session_id="during")))
            lookup = await within_deadline(client.get(f"/v1/responses/{response_id}"))
            # (asked of the other replica: only the store knows the session there)
            state = await within_deadline(other.get("/v1/sessions/kept"))
            replay = await within_deadline(other.get("/v1/sessions/kept/events"))
            cancel = await within_deadline(other.post("/v1/cancel/kept"))
            follow_up = await within_deadline(client.post("/v1/responses", json={
                "model": "fake-model", "input": "more", "stream": True, "previous_response_id": response_id}))
            unnamed = await within_deadline(read_stream(client, "POST", CHAT, json=chat()))
            health = await within_deadline(client.get("/livez"))
        finally:
            stoppable_postgres.thaw()
        # The database answers again: a named session works again, without a restart.
        await until(lambda: _streams(client, "after"), 60, what="named sessions working again", interval=0.2)

    for name, answer in {"named session": named, "Responses lookup": lookup, "session state": state,
                         "replay": replay, "cancel": cancel, "previous_response_id": follow_up}.items():
        assert refused(answer), (name, getattr(answer, "status_code", getattr(answer, "status", None)))
    assert lookup.json()["error"]["code"] == "response_store_unavailable"
    assert state.json()["error"]["code"] == "session_store_unavailable"
    assert unnamed.status == 200 and unnamed.dones == 1  # from memory: the store is not on a stream's path
    assert health.status_code == 200


async def _persisted(client: httpx.AsyncClient, session_id: str) -> bool:
    answer = await client.get(f"/v1/sessions/{session_id}")
    return answer.status_code == 200 and answer.json().get("status") == "ended"


async def _streams(client: httpx.AsyncClient, session_id: str) -> bool:
    got = await read_stream(client, "POST", CHAT, json=chat(session_id=session_id), timeout=DEADLINE)
    if got.status == 200 and got.dones == 1:
        return True
    assert got.status == 503, got.body[:300]  # still catching up: refused, never anything else
    return False


# --- the bound itself, on a store that never answers ------------------------------------------
class Hanging:
    """A store whose every call waits forever (what a frozen database looks like to its client)."""

    name = "hanging"
    commits = 0

    async def load(self, owner: str, session_id: str):
        await asyncio.Event().wait()

    async def open(self) -> None:
        return None

    def signal(self, gen_id: int) -> str:
        return "not bounded: not a coroutine"


async def test_every_call_is_bounded_and_what_is_not_a_call_passes_through():
    store = Bounded(Hanging(), 0.05)
    async with asyncio.timeout(DEADLINE):
        with pytest.raises(StoreTimeout, match="load"):
            await store.load("owner", "s")
    assert store.signal(1) == "not bounded: not a coroutine" and store.commits == 0
    store.on_cancel_request = print  # set on the store itself (the manager does so)
    assert store.target.on_cancel_request is print


async def test_a_failure_hook_turns_every_error_into_the_callers_kind():
    seen = []

    def unavailable(operation: str, error: Exception) -> Exception:
        seen.append((operation, type(error).__name__))
        return RuntimeError("unavailable")

    store = Bounded(Hanging(), 0.05, unavailable)
    async with asyncio.timeout(DEADLINE):
        with pytest.raises(RuntimeError, match="unavailable"):
            await store.load("owner", "s")
    assert seen == [("load", "StoreTimeout")]
