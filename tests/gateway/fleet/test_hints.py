"""The OpenAI protocol fills the routing hints from what it parsed: model, affinity key, prefix."""

from __future__ import annotations

import orjson

from gateway.config import Settings
from gateway.engines.client import EngineClient
from gateway.engines.routing import openai_prefix
from gateway.engines.state import EngineState
from gateway.protocols.openai.prepare import CHAT_PATH, COMPLETIONS_PATH, prepare
from tests.gateway.fleet.conftest import serving
from tests.gateway.fleet.fakes import fake_fleet, fleet_settings

SYSTEM = {"role": "system", "content": "You are terse."}


def engine_state(**settings) -> EngineState:
    settings = Settings(**{"vllm_base_urls": "http://a:1,http://b:1", **settings})
    state = EngineState(settings, EngineClient(settings))
    state.served_models = ["m"]
    return state


def prepared(payload: dict, *, path=CHAT_PATH, resumable=True, **settings):
    return prepare(orjson.dumps(payload), payload, path=path, engine=engine_state(**settings), resumable=resumable)


def test_a_chats_prefix_is_its_opening_so_every_turn_of_a_conversation_shares_it():
    turn_1 = [SYSTEM, {"role": "user", "content": "Name a colour."}]
    turn_3 = [*turn_1, {"role": "assistant", "content": "Red."}, {"role": "user", "content": "Another."},
              {"role": "assistant", "content": "Blue."}, {"role": "user", "content": "One more."}]
    other = [SYSTEM, {"role": "user", "content": "Name a city."}]
    assert openai_prefix({"messages": turn_1}) == openai_prefix({"messages": turn_3}) == orjson.dumps(turn_1)
    assert openai_prefix({"messages": other}) != openai_prefix({"messages": turn_1})


def test_a_completions_prefix_is_the_leading_part_of_its_prompt():
    shared = "x" * 5000
    assert openai_prefix({"prompt": shared + "a"}) == openai_prefix({"prompt": shared + "b"}) == b"x" * 2048
    assert openai_prefix({"prompt": [1, 2, 3]}) == b"[1,2,3]"
    assert openai_prefix({"prompt": ""}) is None


def test_prepare_fills_the_model_the_session_and_the_prefix():
    route = prepared({"model": "m", "messages": [SYSTEM, {"role": "user", "content": "hi"}], "stream": True,
                      "session_id": "conv-1", "user": "alice"}).route
    assert route.model == "m" and route.affinity_key == "conv-1"
    assert route.prefix == orjson.dumps([SYSTEM, {"role": "user", "content": "hi"}])
    by_user = prepared({"messages": [{"role": "user", "content": "hi"}], "user": "alice"}).route
    assert by_user.affinity_key == "alice" and by_user.model == "m"  # no model: the default model's engines


def test_no_prefix_is_computed_when_the_policy_does_not_read_it():
    payload = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert prepared(payload, routing_policy="least_load").route.prefix is None
    single = Settings(vllm_base_url="http://a:1")
    state = EngineState(single, EngineClient(single))
    state.served_models = ["m"]
    assert prepare(None, dict(payload), path=CHAT_PATH, engine=state, resumable=True).route.prefix is None


def test_a_reproducible_resumable_chat_stream_gets_a_continuation_and_nothing_else_does():
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    assert prepared({**chat, "temperature": 0}).continuation is not None
    assert prepared({**chat, "temperature": 1.0, "seed": 3}).continuation is not None
    assert prepared({**chat, "temperature": 0.7}).continuation is None
    assert prepared({**chat, "temperature": 0, "n": 2}).continuation is None
    assert prepared({**chat, "temperature": 0, "logprobs": True}).continuation is None
    assert prepared({**chat, "temperature": 0, "tools": [{"type": "function"}]}).continuation is None
    assert prepared({**chat, "temperature": 0}, resumable=False).continuation is None
    assert prepared({**chat, "temperature": 0}, stream_continuation=False).continuation is None
    assert prepared({"model": "m", "prompt": "x", "stream": True, "temperature": 0},
                    path=COMPLETIONS_PATH).continuation is None


async def test_the_affinity_header_wins_and_keeps_a_client_on_one_engine():
    async with fake_fleet(2) as engines, serving(fleet_settings(engines)) as client:
        for i in range(10):
            body = {"model": "fake-model", "messages": [{"role": "user", "content": f"different {i}"}],
                    "max_tokens": 2, "user": f"user-{i}"}
            answer = await client.post("/v1/chat/completions", json=body, headers={"x-session-affinity": "tenant-7"})
            assert answer.status_code == 200
        assert sorted(engine.requests for engine in engines) == [0, 10]


async def test_requests_the_gateway_builds_itself_are_routed_by_their_payload():
    """The code API's /tokenize and /v1/chat/completions for one conversation go to one engine."""
    async with fake_fleet(2) as engines:
        settings = fleet_settings(engines)
        client = EngineClient(settings)
        state = EngineState(settings, client)
        await client.start()
        try:
            await state.refresh()
            conversation = [{"role": "user", "content": "Write a binary search function"}]
            for i in range(6):
                await client.post_json("/v1/chat/completions", {"model": "fake-model", "max_tokens": 2,
                                                                "messages": conversation})
                conversation = [*conversation, {"role": "assistant", "content": "ok"},
                                {"role": "user", "content": f"again {i}"}]
        finally:
            await client.close()
        assert sorted(engine.requests for engine in engines) == [0, 6]
