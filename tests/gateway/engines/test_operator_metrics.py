"""The metrics the shipped alerts and dashboard need (deploy/, docs/operations.md): time to first
token per model, ready engines per model, the session store's backlog."""

from __future__ import annotations

import asyncio
import time

import httpx

from gateway.engines.buffered_read import reader_of
from gateway.engines.client import EngineClient
from gateway.engines.fleet import Fleet
from gateway.http.metrics import MAX_MODEL_LABELS, OTHER_MODEL, Metrics
from tests.support.fake_engine import running_fake_engine, settings_for
from tests.support.gateway import running_gateway, serving
from tests.support.waiting import until

CHAT = "/v1/chat/completions"
TTFT_COUNT = "gateway_time_to_first_token_seconds_count"


def chat(stream: bool, **extra) -> dict:
    return {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
            "stream": stream, **extra}


async def test_time_to_first_token_is_observed_with_the_first_token_not_with_the_headers():
    hold = asyncio.Event()
    async with running_fake_engine(hold=hold) as engine:
        async with running_gateway(settings_for(engine, session_store="off")) as (url, app):
            registry = app.state.gateway.metrics.registry

            def observed() -> float:
                return registry.get_sample_value(TTFT_COUNT, {"model": "fake-model"}) or 0.0

            async with httpx.AsyncClient(base_url=url, timeout=10) as client:
                async with client.stream("POST", CHAT, json=chat(True)) as response:
                    # The engine's headers reached the client through the gateway; its first token is held.
                    assert response.status_code == 200
                    assert observed() == 0
                    hold.set()
                    body = (await response.aread()).decode()
                assert body.rstrip().endswith("data: [DONE]")
                assert observed() == 1
                assert (await client.post(CHAT, json=chat(False))).status_code == 200
                assert observed() == 1  # a non-streamed answer has no first token of its own
                assert (await client.post("/v1/completions", json={"model": "fake-model", "prompt": "a",
                                                                    "max_tokens": 2, "stream": True})).status_code == 200
                assert observed() == 2


async def test_time_to_first_token_counts_the_wait_for_it():
    async with running_fake_engine(first_chunk_delay=0.3) as engine:
        async with serving(settings_for(engine, session_store="off")) as client:
            response = await client.post(CHAT, json=chat(True))
            registry = client.app.state.gateway.metrics.registry
    assert response.status_code == 200
    # At least the engine's own delay before its first bytes (an upper bound would time the machine).
    assert registry.get_sample_value("gateway_time_to_first_token_seconds_sum", {"model": "fake-model"}) >= 0.3
    assert registry.get_sample_value("gateway_time_to_first_token_seconds_bucket",
                                     {"model": "fake-model", "le": "0.25"}) == 0


def test_only_routes_whose_first_bytes_are_a_token_are_timed():
    metrics = Metrics()
    engines = EngineClient(settings_for(type("E", (), {"base_url": "http://127.0.0.1:9"})()), metrics=metrics)
    for path in ("/v1/chat/completions", "/v1/completions", "/v1/messages"):
        assert engines._first_token_timer(path, None, time.perf_counter()) is not None
    # A Responses stream opens with response.created before any token; others do not stream tokens.
    for path in ("/v1/responses", "/v1/embeddings", "/v1/audio/transcriptions"):
        assert engines._first_token_timer(path, None, time.perf_counter()) is None


async def test_a_reader_without_the_buffered_path_notes_the_first_bytes_once():
    class Content:  # not aiohttp's StreamReader: reader_of falls back to readany
        def __init__(self) -> None:
            self.parts = [b"", b"data: a\n\n", b"data: b\n\n", b""]

        async def readany(self) -> bytes:
            return self.parts.pop(0)

    noted: list[int] = []
    read = reader_of(Content(), lambda: noted.append(1))
    assert [await read() for _ in range(4)] == [b"", b"data: a\n\n", b"data: b\n\n", b""]
    assert noted == [1]


def test_model_labels_are_bounded():
    metrics = Metrics()
    for i in range(MAX_MODEL_LABELS + 10):
        metrics.first_token_timer(f"model-{i}").observe(0.1)
    labels = {sample.labels["model"] for family in metrics.registry.collect()
              if family.name == "gateway_time_to_first_token_seconds" for sample in family.samples}
    assert len(labels) == MAX_MODEL_LABELS + 1 and OTHER_MODEL in labels  # the first 64, then "other"
    assert metrics.registry.get_sample_value(TTFT_COUNT, {"model": OTHER_MODEL}) == 10


def test_ready_engines_per_model_count_only_engines_that_take_requests():
    metrics = Metrics()
    fleet = Fleet([("http://engine-1:8000", None), ("http://engine-2:8000", None), ("http://engine-3:8000", None)],
                  metrics=metrics)
    first, second, third = fleet.engines
    first.ready, first.models = True, ["coder", "chat"]
    second.ready, second.models = True, ["coder"]
    second.ejected_until = time.monotonic() + 60  # failed a request: ejected
    third.ready, third.models = False, ["vision"]  # down: its models are still known
    assert fleet.ready_by_model() == {"coder": 1, "chat": 1, "vision": 0}
    text = metrics.render().decode()
    assert 'gateway_model_engines_ready{model="vision"} 0.0' in text
    assert 'gateway_model_engines_ready{model="coder"} 1.0' in text
    fleet.replace([("http://engine-1:8000", None)])  # engine-3 left the fleet: its model with it
    assert 'model="vision"' not in metrics.render().decode()


async def test_the_session_store_backlog_is_exported_while_writes_fail(tmp_path):
    async with running_fake_engine() as engine:
        settings = settings_for(engine, session_store="sqlite", database_url=f"sqlite+aiosqlite:///{tmp_path}/g.db",
                                session_max_unpersisted_bytes=1 << 20)
        async with serving(settings) as client:
            registry = client.app.state.gateway.metrics.registry
            assert registry.get_sample_value("gateway_session_store_backlog_bytes") == 0
            assert registry.get_sample_value("gateway_session_store_backlog_limit_bytes") == 1 << 20
            store = client.app.state.sessions.store

            async def failing(batch):
                raise OSError("disk unplugged")

            writes, store.write = store.write, failing
            assert (await client.post(CHAT, json=chat(True))).status_code == 200
            await until(lambda: registry.get_sample_value("gateway_session_store_backlog_bytes") > 0, 10,
                        what="a backlog while the store fails")
            store.write = writes  # the store recovers: the next flush writes everything
            await until(lambda: registry.get_sample_value("gateway_session_store_backlog_bytes") == 0, 10,
                        what="the backlog written")


async def test_without_sessions_the_backlog_reads_zero():
    async with running_fake_engine() as engine:
        async with serving(settings_for(engine, session_store="off")) as client:
            text = (await client.get("/metrics")).text
    assert "gateway_session_store_backlog_bytes 0.0" in text.splitlines()
