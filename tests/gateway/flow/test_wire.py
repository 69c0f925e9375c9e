"""What flow control changes on the wire, in process in front of the fake engine: bands asked for by
header or body, the 400 naming the field in each protocol's envelope, the body and header vLLM gets,
``x-queue-wait-ms``. (Queueing itself, on a saturated real engine: test_request_path.py.)"""

from __future__ import annotations

import pytest

from tests.support.gateway import serving

MODEL = "fake-model"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
MESSAGES = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


@pytest.mark.parametrize("stream", [False, True])
async def test_a_band_asked_for_goes_to_vllm_as_its_priority_and_the_band_name_never_does(make_settings, fake_engine,
                                                                                           stream):
    async with serving(make_settings(engine_scheduling_policy="priority")) as client:
        answer = await client.post("/v1/chat/completions", json={**CHAT, "stream": stream, "priority": "batch"})
        assert answer.status_code == 200, answer.text
        assert answer.headers["x-queue-wait-ms"] == "0"
        sent = fake_engine.received[-1]
        assert sent.headers["x-vllm-priority"] == "1" and "priority" not in sent.json
        answer = await client.post("/v1/chat/completions", json={**CHAT, "stream": stream},
                                   headers={"x-priority": "interactive"})  # above the key's (standard): not granted
        assert answer.status_code == 200 and fake_engine.received[-1].headers["x-vllm-priority"] == "0"


async def test_engines_on_fcfs_or_flow_control_off_get_no_priority(make_settings, fake_engine):
    async with serving(make_settings()) as client:
        assert (await client.post("/v1/chat/completions", json=CHAT, headers={"x-priority": "batch"})).status_code == 200
        assert "x-vllm-priority" not in fake_engine.received[-1].headers
    async with serving(make_settings(flow_control=False, engine_scheduling_policy="priority")) as client:
        answer = await client.post("/v1/chat/completions", json=CHAT, headers={"x-priority": "batch"})
        assert answer.status_code == 200 and "x-queue-wait-ms" not in answer.headers
        assert "x-vllm-priority" not in fake_engine.received[-1].headers


async def test_an_unknown_band_is_a_400_naming_the_field_in_the_routes_envelope(client, fake_engine):
    answer = await client.post("/v1/chat/completions", json={**CHAT, "stream": True}, headers={"x-priority": "asap"})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["param"] == "x-priority" and error["code"] == "invalid_priority" and "asap" in error["message"]
    answer = await client.post("/v1/completions", json={"model": MODEL, "prompt": "a", "priority": "vip"})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "priority"
    answer = await client.post("/v1/messages", json=MESSAGES, headers={"x-priority": "asap"})
    assert answer.status_code == 400 and answer.json()["type"] == "error"
    assert "x-priority" in answer.json()["error"]["message"]
    assert fake_engine.received == []  # nothing reached the engine


async def test_routes_that_do_not_generate_never_queue(client, fake_engine):
    answer = await client.get("/v1/models", headers={"x-priority": "asap"})
    assert answer.status_code == 200 and "x-queue-wait-ms" not in answer.headers


async def test_the_code_api_queues_in_its_band_too(make_settings, fake_engine):
    # /generate and /chat (and a feature's engine call, through the same MeteredEngines) are generating
    # requests like /v1/completions: they wait their turn in flow control and carry their band to vLLM.
    # They went straight to the engine without a priority, ahead of every queued request, whatever their band.
    async with serving(make_settings(engine_scheduling_policy="priority")) as client:
        answer = await client.post("/generate", json={"prompt": "def f():", "max_tokens": 4},
                                   headers={"x-priority": "batch"})
        assert answer.status_code == 200, answer.text
        assert answer.headers["x-queue-wait-ms"] == "0"
        sent = fake_engine.received[-1]
        assert sent.path == "/v1/completions" and sent.headers["x-vllm-priority"] == "1"
        answer = await client.post("/chat", json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
                                   headers={"x-priority": "interactive"})  # above the key's (standard): not granted
        assert answer.status_code == 200, answer.text
        sent = fake_engine.received[-1]
        assert sent.path == "/v1/chat/completions" and sent.headers["x-vllm-priority"] == "0"
        answer = await client.post("/generate", json={"prompt": "x", "max_tokens": 4}, headers={"x-priority": "asap"})
        assert answer.status_code == 400 and "x-priority" in answer.text


@pytest.mark.parametrize("settings", [dict(flow_control=False, engine_scheduling_policy="priority"),
                                      dict(engine_scheduling_policy="fcfs"),
                                      dict(engine_scheduling_policy="priority")])
@pytest.mark.parametrize("stream", [False, True])
async def test_a_clients_integer_priority_never_reaches_vllm(make_settings, fake_engine, settings, stream):
    # vLLM's own field: relayed as sent, it let a client jump an engine's priority queue whenever the gateway
    # sent no X-Vllm-Priority of its own (flow control off, or the gateway told fcfs).
    async with serving(make_settings(**settings)) as client:
        answer = await client.post("/v1/chat/completions", json={**CHAT, "stream": stream, "priority": -100})
        assert answer.status_code == 200, answer.text
        sent = fake_engine.received[-1]
        assert "priority" not in sent.json and sent.json["messages"] == CHAT["messages"]
        assert sent.headers.get("x-vllm-priority") in (None, "0")
