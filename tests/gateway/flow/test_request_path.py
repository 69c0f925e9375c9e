"""Flow control on the request path, through the gateway, on the real engine (priority scheduler, two slots).

Every test saturates the engine with two long generations (``ignore_eos``, thousands of
tokens) and one short request waiting inside it, waits until the gateway's scrape has seen
it waiting (so the gateway knows the engine's concurrency and holds what comes next), then
queues requests and frees a slot by disconnecting one long generation's client (vLLM aborts
it). Order is read from the first tokens' arrival, never from timing; every wait has a deadline.

A test waits for queued batch work only after disconnecting the other long generation too (with the
default headroom, ``FLOW_HEADROOM_SLOTS``, the batch band may use only one of the two slots, and that
generation holds it: the batch work went only when it ended by itself, ``LONG`` tokens later: ~100 s).
The tests of the bands' order run without headroom, so that only the order can put a band first.
"""

from __future__ import annotations

import asyncio
import contextlib

import httpx
import openai
import orjson
import pytest

from tests.gateway.flow.conftest import RUNNING_SLOTS
from tests.support.engine_gateway import engine_chat_body
from tests.support.gateway import READ_KEY, WRITE_KEY, bearer, running_gateway
from tests.support.waiting import until

pytestmark = [pytest.mark.integration, pytest.mark.engine]

DEADLINE = 240.0
LONG = 30_000  # tokens of a "long" generation (ignore_eos): only its client leaving ends it in a test


def flow_settings(engine, tmp_path, **overrides):
    from gateway.config import Settings
    values = dict(vllm_base_url=engine.base_url, vllm_api_key=engine.api_key, api_keys=[READ_KEY],
                  admin_api_keys=[WRITE_KEY], database_url=f"sqlite+aiosqlite:///{tmp_path}/gateway.db",
                  session_store="off", engine_metrics_interval=0.2, flow_engine_max_waiting=0,
                  flow_aging_seconds=600, flow_queue_timeout_seconds=600, engine_scheduling_policy="fcfs")
    values.update(overrides)
    return Settings(**values)


async def new_key(client: httpx.AsyncClient, base_url: str, name: str, **body) -> str:
    answer = await client.post(f"{base_url}/admin/keys", json={"name": name, **body}, headers=bearer(WRITE_KEY))
    assert answer.status_code == 201, answer.text
    return answer.json()["key"]


class Streams:
    """Streamed chats through the gateway; ``first`` records the order their first tokens arrived in."""

    def __init__(self, client: httpx.AsyncClient, base_url: str, engine) -> None:
        self.client, self.base_url, self.engine = client, base_url, engine
        self.first: list[str] = []
        self.tasks: dict[str, asyncio.Task] = {}
        self.headers: dict[str, httpx.Headers] = {}

    def start(self, name: str, key: str, max_tokens: int, headers: dict | None = None) -> asyncio.Task:
        task = asyncio.create_task(self._stream(name, key, max_tokens, headers or {}))
        self.tasks[name] = task
        return task

    async def _stream(self, name: str, key: str, max_tokens: int, headers: dict) -> int:
        body = engine_chat_body(self.engine, max_tokens, prompt=f"Request {name}.")
        async with self.client.stream("POST", f"{self.base_url}/v1/chat/completions", json=body,
                                      headers=bearer(key) | headers) as response:
            self.headers[name] = response.headers
            if response.status_code != 200:
                return response.status_code
            async for line in response.aiter_lines():
                if line.startswith("data: {") and name not in self.first:
                    choices = orjson.loads(line[6:])["choices"]
                    if choices and choices[0].get("delta", {}).get("content"):
                        self.first.append(name)
            return response.status_code

    async def stop(self, name: str) -> None:
        """The client leaves (the gateway closes the engine request: vLLM aborts it)."""
        task = self.tasks.pop(name)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def queue_length(client: httpx.AsyncClient, base_url: str, band: str | None = None) -> float:
    text = (await client.get(f"{base_url}/metrics", headers=bearer(WRITE_KEY))).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith("gateway_queue_length{") and (band is None or f'band="{band}"' in line):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def dropped(client: httpx.AsyncClient, base_url: str, reason: str) -> float:
    text = (await client.get(f"{base_url}/metrics", headers=bearer(WRITE_KEY))).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("gateway_queue_dropped_total{") and f'reason="{reason}"' in line)


async def queued(client: httpx.AsyncClient, base_url: str, count: int, band: str | None = None) -> None:
    async def holds() -> bool:
        return await queue_length(client, base_url, band) == count
    await until(holds, DEADLINE, what=f"{count} requests queued in the gateway ({band or 'any band'})", interval=0.05)


async def engine_waiting(engine, count: int) -> None:
    async def holds() -> bool:
        return (await engine.ametrics()).get("vllm:num_requests_waiting", 0) == count
    await until(holds, DEADLINE, what=f"{count} requests waiting inside the engine", interval=0.05)


async def saturate(streams: Streams, app, key: str, headers: dict | None = None) -> None:
    """Two long generations running and one short one waiting inside the engine, seen by the gateway's scrape."""
    for i in range(RUNNING_SLOTS):
        streams.start(f"running-{i}", key, LONG, headers)
    await until(lambda: sum(1 for name in streams.first if name.startswith("running-")) == RUNNING_SLOTS,
                DEADLINE, what="both long generations running")
    streams.start("inside", key, 4, headers)
    engine = app.state.gateway.engines.fleet.engines[0]
    await until(lambda: engine.load is not None and engine.load.waiting >= 1, DEADLINE,
                what="the gateway's scrape seeing a request wait inside the engine")


async def test_an_interactive_request_goes_before_batch_requests_queued_earlier(priority_engine, tmp_path):
    """The gateway's own ordering: the engines run fcfs here as far as the gateway knows (no priority sent).

    No headroom: with it, the batch band may not take a slot of an engine seen saturated, so the
    interactive request would go first whatever the bands' order; without it, the freed slot goes to
    whichever the gateway picks, and only the bands' order picks the interactive request."""
    settings = flow_settings(priority_engine, tmp_path, flow_headroom_slots=0)
    async with running_gateway(settings) as (base_url, app), httpx.AsyncClient(timeout=DEADLINE) as client, \
            asyncio.timeout(DEADLINE):
        interactive_key = await new_key(client, base_url, "chat app", priority="interactive")
        streams = Streams(client, base_url, priority_engine)
        low = {"x-priority": "batch"}  # READ_KEY is standard: it may ask for the lower band
        await saturate(streams, app, READ_KEY, low)
        for i in range(3):
            streams.start(f"batch-{i}", READ_KEY, 4, low)
            await queued(client, base_url, i + 1, "batch")  # their order is certain
        sdk = openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key=interactive_key, max_retries=0)
        order = streams.first

        async def interactive() -> str:
            stream = await sdk.chat.completions.create(model=priority_engine.model, max_tokens=4, temperature=0,
                                                       messages=[{"role": "user", "content": "Quick!"}], stream=True,
                                                       extra_body={"ignore_eos": True})
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content and "interactive" not in order:
                    order.append("interactive")
            return stream.response.headers["x-queue-wait-ms"]

        quick = asyncio.create_task(interactive())
        await queued(client, base_url, 1, "interactive")
        await streams.stop("running-0")  # a slot frees: the gateway dispatches the highest band first
        waited_ms = await quick
        await streams.stop("running-1")  # (the batch work need not wait for the long generation to end)
        assert [await streams.tasks[f"batch-{i}"] for i in range(3)] == [200] * 3
        await streams.tasks["inside"]
        assert int(waited_ms) > 0
        assert int(streams.headers["batch-0"]["x-queue-wait-ms"]) > 0
        assert await queue_length(client, base_url) == 0
    gateway_queued = [name for name in order if name.startswith("batch-") or name == "interactive"]
    assert gateway_queued[0] == "interactive", order


async def test_priority_reaches_vllm_so_it_orders_what_waits_inside_the_engine(priority_engine, tmp_path):
    """The gateway holds nothing here (a deep queue allowed inside the engine): only vLLM's priority scheduler,
    told each request's band by the gateway, can put the interactive request before earlier batch ones."""
    settings = flow_settings(priority_engine, tmp_path, flow_engine_max_waiting=100,
                             engine_scheduling_policy="priority",
                             flow_headroom_slots=0)  # (with headroom the batch band never waits inside an engine)
    async with running_gateway(settings) as (base_url, app), httpx.AsyncClient(timeout=DEADLINE) as client, \
            asyncio.timeout(DEADLINE):
        interactive_key = await new_key(client, base_url, "chat app", priority="interactive")
        streams = Streams(client, base_url, priority_engine)
        low = {"x-priority": "batch"}
        for i in range(RUNNING_SLOTS):
            streams.start(f"running-{i}", READ_KEY, LONG, low)
        await until(lambda: len(streams.first) == RUNNING_SLOTS, DEADLINE, what="both long generations running")
        for i in range(3):
            streams.start(f"batch-{i}", READ_KEY, 4, low)
            await engine_waiting(priority_engine, i + 1)
        streams.start("interactive", interactive_key, 4)
        await engine_waiting(priority_engine, 4)
        assert await queue_length(client, base_url) == 0  # nothing held in the gateway
        await streams.stop("running-0")
        assert [await streams.tasks[name] for name in ("batch-0", "batch-1", "batch-2", "interactive")] == [200] * 4
        await streams.stop("running-1")
    assert [name for name in streams.first if not name.startswith("running-")][0] == "interactive", streams.first


async def test_a_tenant_flooding_the_queue_does_not_starve_another(priority_engine, tmp_path):
    settings = flow_settings(priority_engine, tmp_path)
    async with running_gateway(settings) as (base_url, app), httpx.AsyncClient(timeout=DEADLINE) as client, \
            asyncio.timeout(DEADLINE):
        flooding = await new_key(client, base_url, "flooding team's key")
        modest = await new_key(client, base_url, "modest team's key")
        streams = Streams(client, base_url, priority_engine)
        await saturate(streams, app, READ_KEY)
        for i in range(10):  # ten times the other tenant's load, all queued before it
            streams.start(f"flood-{i}", flooding, 4)
        await queued(client, base_url, 10)
        for i in range(2):
            streams.start(f"modest-{i}", modest, 4)
        await queued(client, base_url, 12)
        await streams.stop("running-0")
        await streams.stop("running-1")
        statuses = await asyncio.gather(*(streams.tasks[name] for name in list(streams.tasks)))
        assert statuses == [200] * len(statuses)
    served = [name for name in streams.first if name.startswith(("flood-", "modest-"))]
    # Equal weights: the two share slots while both wait (first-come-first-served would put the modest
    # tenant's requests 11th and 12th).
    assert max(served.index("modest-0"), served.index("modest-1")) <= 4, served


async def test_a_client_that_leaves_while_queued_leaves_the_queue_at_once(priority_engine, tmp_path):
    settings = flow_settings(priority_engine, tmp_path)
    async with running_gateway(settings) as (base_url, app), httpx.AsyncClient(timeout=DEADLINE) as client, \
            asyncio.timeout(DEADLINE):
        streams = Streams(client, base_url, priority_engine)
        await saturate(streams, app, READ_KEY)
        streams.start("impatient", READ_KEY, 4)
        await queued(client, base_url, 1)
        await streams.stop("impatient")  # its client disconnects while it waits
        await queued(client, base_url, 0)
        assert await dropped(client, base_url, "cancelled") == 1
        for name in list(streams.tasks):
            if name.startswith("running-"):
                await streams.stop(name)
        await streams.tasks["inside"]


async def test_a_background_response_waits_in_the_gateway_queue_behind_an_interactive_request(priority_engine,
                                                                                              tmp_path):
    """A background run (``background: true``) used to open its engine request at once, whatever waited.

    No headroom (as above): the bands' order, not the batch band's smaller room, puts the interactive
    request first."""
    settings = flow_settings(priority_engine, tmp_path, session_store="memory", flow_headroom_slots=0)
    async with running_gateway(settings) as (base_url, app), httpx.AsyncClient(timeout=DEADLINE) as client, \
            asyncio.timeout(DEADLINE):
        interactive_key = await new_key(client, base_url, "chat app", priority="interactive")
        streams = Streams(client, base_url, priority_engine)
        await saturate(streams, app, READ_KEY)
        streams.start("interactive", interactive_key, 4)
        await queued(client, base_url, 1, "interactive")
        order = streams.first

        async def background() -> httpx.Response:
            body = {"model": priority_engine.model, "input": "Background work.", "max_output_tokens": 4,
                    "temperature": 0, "background": True}
            answer = await client.post(f"{base_url}/v1/responses", json=body,
                                       headers=bearer(READ_KEY) | {"x-priority": "batch"})
            order.append("background")  # its POST answers once the run was let go
            return answer

        started = asyncio.create_task(background())
        await queued(client, base_url, 1, "batch")  # in the gateway's queue, in the band it asked for
        await streams.stop("running-0")  # slots free one by one: the interactive request goes first
        assert await streams.tasks["interactive"] == 200
        await streams.stop("running-1")  # (the background run need not wait for the long generation to end)
        answer = await started
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] in ("queued", "in_progress") and int(answer.headers["x-queue-wait-ms"]) > 0
        await streams.tasks["inside"]
        response_id = answer.json()["id"]

        async def finished() -> bool:
            found = await client.get(f"{base_url}/v1/responses/{response_id}", headers=bearer(READ_KEY))
            return found.json()["status"] in ("completed", "incomplete")  # (incomplete: its max_output_tokens)
        await until(finished, DEADLINE, what="the background run ended", interval=0.1)
        assert app.state.gateway.relay.flow.scheduler.caps.held == 0  # its grant came back at its end
    assert order.index("interactive") < order.index("background"), order


async def test_the_batch_band_leaves_a_slot_so_an_interactive_request_starts_at_once(priority_engine, tmp_path):
    """FLOW_HEADROOM_SLOTS (default 1): once the engine was seen saturated, batch work takes a slot
    only if one stays free after it, so an interactive request starts while batch work runs."""
    settings = flow_settings(priority_engine, tmp_path)
    assert settings.flow_headroom_slots == 1
    async with running_gateway(settings) as (base_url, app), httpx.AsyncClient(timeout=DEADLINE) as client, \
            asyncio.timeout(DEADLINE):
        interactive_key = await new_key(client, base_url, "chat app", priority="interactive")
        streams = Streams(client, base_url, priority_engine)
        low = {"x-priority": "batch"}
        await saturate(streams, app, READ_KEY, low)  # the engine's concurrency (2) is known now
        await streams.stop("running-0")  # "inside" runs in the freed slot, and ends (4 tokens)
        assert await streams.tasks["inside"] == 200
        streams.start("later", READ_KEY, LONG, low)  # one batch generation runs: a second would leave none free
        await queued(client, base_url, 1, "batch")
        streams.start("interactive", interactive_key, 4)
        assert await streams.tasks["interactive"] == 200
        assert not streams.tasks["running-1"].done()  # it got the free slot: no batch generation had to end
        # (The engine's learned concurrency may grow by one now that 2 run and none waits: "later" may
        # go any time from here, so nothing more is asserted of it.)
        await streams.stop("running-1")
        await streams.stop("later")


async def test_the_code_api_waits_in_the_gateway_queue_like_the_openai_routes(priority_engine, tmp_path):
    """/generate on a saturated engine waits its turn in the gateway, in the band it asks for (it went
    straight to the engine, past every queued request, whatever its band)."""
    settings = flow_settings(priority_engine, tmp_path)
    async with running_gateway(settings) as (base_url, app), httpx.AsyncClient(timeout=DEADLINE) as client, \
            asyncio.timeout(DEADLINE):
        streams = Streams(client, base_url, priority_engine)
        await saturate(streams, app, READ_KEY)
        code = asyncio.create_task(client.post(f"{base_url}/generate", json={"prompt": "def f():", "max_tokens": 4},
                                               headers=bearer(READ_KEY) | {"x-priority": "batch"}))
        await queued(client, base_url, 1, "batch")
        for name in [name for name in streams.tasks if name.startswith("running-")]:
            await streams.stop(name)  # slots free: the queued /generate goes
        answer = await code
        assert answer.status_code == 200, answer.text
        assert int(answer.headers["x-queue-wait-ms"]) > 0
        assert answer.json()["finish_reason"] in ("stop", "length")
        await streams.tasks["inside"]
        assert await queue_length(client, base_url) == 0
