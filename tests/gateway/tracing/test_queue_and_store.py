"""Where a request's time went before and around the engine: the flow-control queue and the session store.

The queue: the server span names the band, the outcome (``dispatched``, ``refused``, ``left``)
and the wait; a request that waited gets a ``queue`` child span over its wait. The engine is
made full by handing it a scrape (running 1, waiting 1: the engine runs one at a time and
has a request waiting), so the next request queues; a later scrape showing it idle lets the
request go. The store: each flush that wrote a traced session's events is one
``gateway.session.write`` event on its server span, or (after the response ended) one short
``session.write`` child span, never one per event.
"""

from __future__ import annotations

import asyncio

from gateway.engines.scrape import Load
from tests.gateway.tracing.conftest import traced
from tests.gateway.tracing.test_spans import chat, wait_trace
from tests.support.gateway import serving
from tests.support.waiting import until

DEADLINE = 30
QUEUEING = {"flow_engine_max_waiting": 0, "engine_metrics_interval": 0}  # the test hands the engine its scrapes


def full(core) -> object:
    """The engine as a scrape that saw it saturated describes it; its flow control."""
    core.engines.fleet.engines[0].scraped(Load(running=1, waiting=1))
    return core.relay.flow


async def queued(flow, count: int) -> None:
    await until(lambda: flow.scheduler.queued() == count, DEADLINE, what=f"{count} request(s) queued")


def server_and_queue(spans):
    server = next(span for span in spans if span.kind == "SERVER")
    waits = [span for span in spans if span.name == "queue"]
    return server, waits


async def test_a_request_dispatched_at_once_names_its_band_and_gets_no_queue_span(make_settings, receiver):
    async with serving(make_settings(**traced(receiver))) as client:
        response = await client.post("/v1/chat/completions", json=chat(), headers={"x-priority": "batch"})
    assert response.status_code == 200 and response.headers["x-queue-wait-ms"] == "0"
    server, waits = server_and_queue(await wait_trace(receiver, response.headers["x-trace-id"], {"chat fake-model"}))
    assert server.attributes["gateway.queue.band"] == "batch"
    assert server.attributes["gateway.queue.outcome"] == "dispatched"
    assert server.attributes["gateway.queue.wait_ms"] == 0
    assert waits == []


async def test_a_request_that_waited_has_a_queue_span_under_its_server_span(make_settings, receiver):
    async with serving(make_settings(**traced(receiver), **QUEUEING)) as client, asyncio.timeout(DEADLINE):
        core = client.app.state.gateway
        flow = full(core)
        answer = asyncio.create_task(client.post("/v1/chat/completions", json=chat(stream=True)))
        await queued(flow, 1)
        core.engines.fleet.engines[0].scraped(Load(running=0, waiting=0))  # it finished its work
        flow.capacity_changed()
        response = await answer
    assert response.status_code == 200
    waited_ms = int(response.headers["x-queue-wait-ms"])
    server, waits = server_and_queue(await wait_trace(receiver, response.headers["x-trace-id"],
                                                      {"chat fake-model", "queue"}))
    assert server.attributes["gateway.queue.band"] == "standard"  # the key's default band
    assert server.attributes["gateway.queue.outcome"] == "dispatched"
    assert server.attributes["gateway.queue.wait_ms"] == waited_ms
    [wait] = waits
    assert wait.parent_id == server.span_id and wait.kind == "INTERNAL"
    assert wait.attributes["gateway.queue.outcome"] == "dispatched"
    assert wait.attributes["gateway.queue.wait_ms"] == waited_ms
    assert wait.status != 2


async def test_a_request_refused_by_the_queue_says_why(make_settings, receiver):
    settings = make_settings(**traced(receiver), **QUEUEING, flow_queue_timeout_seconds=0.2)
    async with serving(settings) as client, asyncio.timeout(DEADLINE):
        full(client.app.state.gateway)
        response = await client.post("/v1/chat/completions", json=chat())  # the engine never frees up
    assert response.status_code == 503 and response.json()["error"]["code"] == "queue_timeout"
    server, waits = server_and_queue(await wait_trace(receiver, response.headers["x-trace-id"], {"queue"}))
    assert server.attributes["gateway.queue.outcome"] == "refused"
    assert server.attributes["gateway.queue.refusal"] == "timeout"
    [wait] = waits
    assert wait.parent_id == server.span_id
    assert wait.attributes["gateway.queue.outcome"] == "refused" and wait.status == 2


async def test_a_request_whose_client_left_the_queue_says_so(make_settings, receiver):
    async with serving(make_settings(**traced(receiver), **QUEUEING)) as client, asyncio.timeout(DEADLINE):
        flow = full(client.app.state.gateway)
        answer = asyncio.create_task(client.post("/v1/chat/completions", json=chat(stream=True)))
        await queued(flow, 1)
        answer.cancel()  # the client gives up while it waits
        await asyncio.gather(answer, return_exceptions=True)
        await queued(flow, 0)
    [wait] = await asyncio.to_thread(receiver.wait_for, lambda spans: [s for s in spans if s.name == "queue"] or None)
    assert wait.attributes["gateway.queue.outcome"] == "left"
    assert wait.attributes["gateway.queue.band"] == "standard"


def session_writes(spans, trace_id: str):
    """Every store write of the trace: (attributes, where) once the one that wrote the ending is among them."""
    mine = [span for span in spans if span.trace_id == trace_id]
    server = next((span for span in mine if span.kind == "SERVER"), None)
    if server is None:
        return None
    writes = [(attributes, "event") for name, attributes in server.events if name == "gateway.session.write"]
    writes += [(span.attributes, span.parent_id) for span in mine if span.name == "session.write"]
    return (server, writes) if any(attributes["gateway.session.ending"] for attributes, _ in writes) else None


async def test_a_sessions_store_writes_are_on_its_trace_once_per_flush(make_settings, receiver, tmp_path):
    settings = make_settings(**traced(receiver), session_store="sqlite",
                             sessions_database_url=f"sqlite+aiosqlite:///{tmp_path}/sessions.db")
    async with serving(settings) as client:
        response = await client.post("/v1/chat/completions", json=chat(stream=True, max_tokens=8,
                                                                       session_id="traced-session"))
        assert response.status_code == 200 and b"data: [DONE]" in response.content
        trace_id = response.headers["x-trace-id"]
        server, writes = await asyncio.to_thread(receiver.wait_for, lambda spans: session_writes(spans, trace_id))
    assert server.attributes["gateway.session.id"] == "traced-session"
    streamed = response.content.count(b"\n\n")  # every event the client got was stored
    assert sum(attributes["gateway.session.events"] for attributes, _ in writes) == streamed
    assert sum(attributes["gateway.session.bytes"] for attributes, _ in writes) > 0
    assert [attributes["gateway.session.ending"] for attributes, _ in writes].count(True) == 1
    assert all(where in ("event", server.span_id) for _, where in writes)
    assert all(attributes["gateway.session.write_ms"] >= 0 and "error.type" not in attributes
               for attributes, _ in writes)
    assert len(writes) <= streamed  # per flush, not per event


async def test_a_failed_store_write_is_on_the_trace_and_the_retry_too(make_settings, receiver, tmp_path):
    settings = make_settings(**traced(receiver), session_store="sqlite",
                             sessions_database_url=f"sqlite+aiosqlite:///{tmp_path}/sessions.db")
    async with serving(settings) as client:
        store = client.app.state.sessions.store

        async def failing(batch):
            raise OSError("disk unplugged")

        writes, store.write = store.write, failing
        response = await client.post("/v1/chat/completions", json=chat(stream=True, session_id="unlucky"))
        assert response.status_code == 200
        trace_id = response.headers["x-trace-id"]

        def failed(spans):
            mine = [span for span in spans if span.trace_id == trace_id]
            found = [attributes for span in mine for name, attributes in span.events if name == "gateway.session.write"]
            found += [span.attributes for span in mine if span.name == "session.write"]
            return [attributes for attributes in found if attributes.get("error.type") == "OSError"]

        await asyncio.to_thread(receiver.wait_for, failed)
        store.write = writes  # the store recovers: the next flush writes everything, the ending included

        def stored_ending(spans):
            found = session_writes(spans, trace_id)
            return found and [attributes for attributes, _ in found[1]
                              if attributes["gateway.session.ending"] and "error.type" not in attributes]

        [ending] = await asyncio.to_thread(receiver.wait_for, stored_ending)
    assert ending["gateway.session.events"] > 0  # what the failed flushes could not write
