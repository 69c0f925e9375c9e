"""Failover before the first byte, ejection and readmission, model routing: the gateway in front of fake engines."""

from __future__ import annotations

import asyncio
import time

from tests.gateway.fleet.conftest import serving
from tests.gateway.fleet.fakes import fake_fleet, fleet_settings

CHAT = "/v1/chat/completions"


def chat_body(i: int = 0, **extra) -> dict:
    return {"model": "fake-model", "messages": [{"role": "user", "content": f"question {i}"}], "max_tokens": 4,
            **extra}


def sample(client, name: str, **labels) -> float:
    value = client.app.state.gateway.metrics.registry.get_sample_value(name, labels)
    return value or 0.0


async def test_a_single_vllm_base_url_works_as_before(fake_engine):
    from tests.support.fake_engine import settings_for

    async with serving(settings_for(fake_engine, session_store="off")) as client:
        response = await client.post(CHAT, json=chat_body())
        assert response.status_code == 200
        assert [engine.id for engine in client.app.state.gateway.engine_state.engines] == [fake_engine.base_url]


async def test_concurrent_requests_spread_over_the_engines_by_their_load():
    # Each answer takes a while, so all 40 are open at once: the load bound keeps any engine
    # from taking more than ceil(1.25 x 41 / 2) = 26 of them, whatever their prefixes hash to.
    async with fake_fleet(2, response_delay=0.2) as engines, serving(fleet_settings(engines)) as client:
        answers = await asyncio.gather(*(client.post(CHAT, json=chat_body(i)) for i in range(40)))
        assert all(answer.status_code == 200 for answer in answers)
        assert all(engine.requests >= 14 for engine in engines), [engine.requests for engine in engines]


async def test_a_refused_connection_is_retried_on_another_engine_and_the_engine_is_ejected():
    # Round robin: the first request goes to the first engine, whatever its port hashes to.
    async with fake_fleet(2) as (down, up), serving(fleet_settings([down, up], routing_policy="round_robin")) as client:
        await down.stop()
        answers = [await client.post(CHAT, json=chat_body(i)) for i in range(10)]
        assert [answer.status_code for answer in answers] == [200] * 10
        assert up.requests == 10
        assert sample(client, "gateway_engine_retries_total", engine=down.base_url) == 1  # then it was ejected
        errors = sum(sample(client, "gateway_engine_errors_total", engine=down.base_url, kind=kind)
                     for kind in ("refused", "reset", "disconnected"))
        assert errors == 1
        assert sample(client, "gateway_engine_up", engine=down.base_url) == 0


async def test_a_503_before_the_answer_is_retried_elsewhere_for_plain_and_streamed_requests():
    async with fake_fleet(2) as (sleeping, awake), \
            serving(fleet_settings([sleeping, awake], routing_policy="round_robin", engine_eject_seconds=0)) as client:
        sleeping.mode = "http_503"
        # Round robin, never ejected (ENGINE_EJECT_SECONDS=0): each request tries the sleeping engine first.
        plain = await client.post(CHAT, json=chat_body(1))
        streamed = await client.post(CHAT, json=chat_body(2, stream=True))
        assert [plain.status_code, streamed.status_code] == [200, 200]
        assert streamed.text.rstrip().endswith("data: [DONE]")
        assert sleeping.requests == 2 and awake.requests == 2
        assert sample(client, "gateway_engine_errors_total", engine=sleeping.base_url, kind="http_503") == 2


async def test_an_engine_dying_during_a_non_streamed_generation_costs_the_client_nothing():
    async with fake_fleet(2) as (dying, healthy), \
            serving(fleet_settings([dying, healthy], routing_policy="round_robin")) as client:
        dying.die_after = 0
        answers = [await client.post(CHAT, json=chat_body(i)) for i in range(6)]
        assert [answer.status_code for answer in answers] == [200] * 6
        assert dying.requests == 1  # tried once, then ejected
        assert answers[0].json()["choices"][0]["message"]["content"] == "tok tok tok tok "


async def test_attempts_are_bounded_and_the_last_failure_reaches_the_client():
    async with fake_fleet(4) as engines, serving(fleet_settings(engines, engine_max_attempts=2)) as client:
        for engine in engines:
            engine.mode = "http_503"
        answer = await client.post(CHAT, json=chat_body())
        assert answer.status_code == 502 and "sleeping" in answer.json()["error"]["message"]
        assert sum(engine.requests for engine in engines) == 2


async def test_with_every_engine_down_the_answer_is_a_503():
    async with fake_fleet(2) as engines, serving(fleet_settings(engines)) as client:
        for engine in engines:
            await engine.stop()
        answer = await client.post(CHAT, json=chat_body())
        assert answer.status_code == 503 and answer.json()["error"]["code"] == "engine_unavailable"


async def test_an_engine_that_is_not_ready_gets_no_request():
    async with fake_fleet(2) as (unready, ready):
        unready.health_status = 503  # up, but /health says it cannot serve
        async with serving(fleet_settings([unready, ready])) as client:
            answers = [await client.post(CHAT, json=chat_body(i)) for i in range(10)]
            assert [answer.status_code for answer in answers] == [200] * 10
            assert unready.requests == 0 and ready.requests == 10


async def test_an_ejected_engine_is_readmitted_once_its_ejection_ended_and_it_is_ready():
    async with fake_fleet(2) as (flaky, steady):
        settings = fleet_settings([flaky, steady], engine_eject_seconds=0.2, routing_policy="round_robin")
        async with serving(settings) as client:
            flaky.mode = "http_503"
            for i in range(4):
                assert (await client.post(CHAT, json=chat_body(i))).status_code == 200
            assert flaky.requests == 1  # ejected after its one 503
            flaky.mode = "ok"
            state = client.app.state.gateway.engine_state
            engine = state.fleet.get(flaky.base_url)
            deadline = time.monotonic() + 10
            while engine.ejected:  # the ejection runs out by itself
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            for i in range(4):
                assert (await client.post(CHAT, json=chat_body(i))).status_code == 200
            assert flaky.requests == 3  # round robin again: two of the four


async def test_a_restarted_engine_is_readmitted_by_the_next_look():
    async with fake_fleet(2) as (restarted, steady):
        async with serving(fleet_settings([restarted, steady], routing_policy="round_robin")) as client:
            state = client.app.state.gateway.engine_state
            await restarted.stop()
            await state.refresh()
            assert not state.fleet.get(restarted.base_url).ready
            await restarted.start()  # the same port
            await state.refresh()
            assert state.fleet.get(restarted.base_url).ready
            for i in range(4):
                assert (await client.post(CHAT, json=chat_body(i))).status_code == 200
            assert restarted.requests == 2


async def test_requests_go_to_the_engines_serving_their_model():
    async with fake_fleet(2) as (small, large):
        small.models, large.models = ["small"], ["large"]
        async with serving(fleet_settings([small, large])) as client:
            listing = (await client.get("/v1/models")).json()
            assert [card["id"] for card in listing["data"]] == ["small", "large", "stack-2.9"]
            for i in range(4):
                assert (await client.post(CHAT, json={**chat_body(i), "model": "large"})).status_code == 200
            assert (small.requests, large.requests) == (0, 4)
            unknown = await client.post(CHAT, json={**chat_body(), "model": "huge"})
            assert unknown.status_code == 404
            assert unknown.json()["error"]["message"] == (
                "The model 'huge' does not exist. Available models: small, large, stack-2.9")
            await large.stop()
            await client.app.state.gateway.engine_state.refresh()
            down = await client.post(CHAT, json={**chat_body(), "model": "large"})
            assert down.status_code == 503 and "'large'" in down.json()["error"]["message"]
            assert (await client.post(CHAT, json={**chat_body(), "model": "small"})).status_code == 200
            # Retrieving it answers as a request for it does (it used to be a 404 "does not exist");
            # a model no engine ever served is still a 404.
            card = await client.get("/v1/models/large")
            assert card.status_code == 503 and card.json()["error"]["code"] == "engine_unavailable"
            assert (await client.get("/v1/models/huge")).status_code == 404
            # An unknown model's 404 still lists it among the valid names (it used to drop it while it is down).
            unknown = await client.post(CHAT, json={**chat_body(), "model": "huge"})
            assert unknown.status_code == 404
            assert unknown.json()["error"]["message"] == (
                "The model 'huge' does not exist. Available models: small, stack-2.9, large")


async def test_engines_found_by_dns_serve_requests_and_leave_with_their_address():
    from gateway.engines.discovery import DnsDiscovery

    async with fake_fleet(1) as (engine,):
        answers = [["127.0.0.1"]]

        async def resolver(host: str, port: int) -> list[str]:
            return answers[-1]

        settings = fleet_settings([], vllm_base_urls=[], vllm_dns_url=f"http://engines.test:{engine.port}")
        async with serving(settings) as client:
            state = client.app.state.gateway.engine_state
            state.discovery = DnsDiscovery(settings.vllm_dns_url, api_key=None, resolver=resolver)  # the stub
            await state.discover()
            assert [e.id for e in state.engines] == [engine.base_url]
            assert (await client.post(CHAT, json=chat_body())).status_code == 200
            answers.append([])  # the Service has no ready pod any more
            await state.discover()
            answer = await client.post(CHAT, json=chat_body())
            assert answer.status_code == 503
            assert engine.requests == 1


async def test_an_engine_whose_streams_open_then_stall_is_ejected_for_longer_each_time():
    """vLLM with a hung engine core: its API server still answers /health (200) and a stream's headers, then
    nothing. Response headers are not a request served: its ejections double (5 s, then 10 s), where they
    used to start again at 5 s after every stream's headers, so it kept getting a stream every 5 s."""
    async with fake_fleet(1) as (zombie,):
        settings = fleet_settings([zombie], upstream_chunk_timeout=0.3)
        async with serving(settings) as client:
            engine = client.app.state.gateway.engine_state.fleet.get(zombie.base_url)
            zombie.stall_after = 0
            first = await client.post("/v1/completions", json={"model": "fake-model", "prompt": "a", "max_tokens": 4,
                                                               "stream": True})
            assert "stream_interrupted" in first.text and zombie.streams_started == 1
            assert 0 < engine.ejected_until - time.monotonic() <= 5
            engine.ejected_until = 0.0  # that ejection ran out: the next stream may go there again
            second = await client.post("/v1/completions", json={"model": "fake-model", "prompt": "b", "max_tokens": 4,
                                                                "stream": True})
            assert "stream_interrupted" in second.text and zombie.streams_started == 2
            assert engine.ejected_until - time.monotonic() > 5  # doubled: 10 s
            # A stream it does serve to its end ends the run.
            zombie.stall_after = None
            engine.ejected_until = 0.0
            served = await client.post("/v1/completions", json={"model": "fake-model", "prompt": "c", "max_tokens": 4,
                                                                "stream": True})
            assert served.status_code == 200 and served.text.rstrip().endswith("data: [DONE]")
            assert zombie.streams_started == 3 and engine.failures_in_a_row == 0
