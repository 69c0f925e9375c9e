"""The fleet as one engine for the rest of the gateway: readiness, the union of models, model names."""

from __future__ import annotations

import pytest

from gateway.config import Settings
from gateway.engines.errors import EngineTimeout, EngineUnavailable
from gateway.engines.state import TIMEOUTS_BEFORE_NOT_READY, EngineState
from gateway.failures import NotFound, Unavailable
from gateway.http.errors import http_error


class Engines:
    """An engine client answering each engine's looks from a table (url -> models, or an exception)."""

    def __init__(self, table: dict) -> None:
        self.table = table

    async def request_bytes(self, method, path, *args, route=None, **kwargs):
        answer = self.table[route.engine]
        if isinstance(answer, Exception):
            raise answer
        return 200, b""

    async def get_json(self, path, *, route=None, **kwargs):
        return {"data": [{"id": name, "max_model_len": 1000 + i, "root": f"/{name}"}
                         for i, name in enumerate(self.table[route.engine])]}


A, B = "http://a:8000", "http://b:8000"


def state_for(table: dict, **settings) -> EngineState:
    return EngineState(Settings(vllm_base_urls=",".join(table), **settings), Engines(table))


async def test_the_models_are_the_union_of_the_ready_engines():
    state = state_for({A: ["small"], B: ["large", "small"]})
    await state.refresh()
    assert state.ready and state.served_models == ["small", "large"]
    assert state.public_models == ["small", "large", "stack-2.9"]
    assert state.resolve_model("large") is None
    assert state.resolve_model("stack-2.9") == "small"  # aliases name the default model


async def test_an_unknown_model_is_a_404_listing_every_valid_name():
    state = state_for({A: ["small"], B: ["large"]})
    await state.refresh()
    with pytest.raises(NotFound) as caught:
        state.resolve_model("huge")
    assert http_error(caught.value).status == 404 and caught.value.code == "model_not_found"
    assert caught.value.message == "The model 'huge' does not exist. Available models: small, large, stack-2.9"


async def test_a_model_whose_engines_are_all_down_is_a_503_not_a_404():
    table = {A: ["small"], B: ["large"]}
    state = state_for(table)
    await state.refresh()
    table[B] = EngineUnavailable("the inference engine is unreachable (Connection refused)")
    await state.refresh()
    assert state.ready and state.served_models == ["small"]
    with pytest.raises(Unavailable) as caught:
        state.resolve_model("large")
    assert (http_error(caught.value).status, caught.value.code) == (503, "engine_unavailable")
    assert state.fleet.get(B).error_kind == "refused" and not state.fleet.get(B).reachable


async def test_the_fleet_is_ready_while_any_engine_is_and_says_why_when_none_is():
    table = {A: ["m"], B: ["m"]}
    state = state_for(table)
    await state.refresh()
    table[A] = EngineUnavailable("the inference engine is unreachable (Connection refused)")
    await state.refresh()
    assert state.ready and state.last_error is None
    table[B] = table[A]
    await state.refresh()
    assert not state.ready and "Connection refused" in state.last_error
    assert state.served_models == ["m"]  # still known: a request for it is a 503, not a 404


async def test_model_path_names_the_default_model_and_its_context_length():
    state = state_for({A: ["small"], B: ["large"]}, model_path="large")
    await state.refresh()
    assert state.default_model == "large" and state.max_model_len == 1000 and state.root == "/large"


async def test_engine_state_survives_slow_health_answers_but_not_a_dead_engine():
    class Upstream:
        failure: Exception | None = None

        async def request_bytes(self, *args, **kwargs):
            if self.failure:
                raise self.failure
            return 200, b""

        async def get_json(self, *args, **kwargs):
            return {"data": [{"id": "m", "max_model_len": 100, "root": "/m"}]}

    upstream = Upstream()
    engine = EngineState(Settings(), upstream)
    await engine.refresh()
    assert engine.ready and engine.served_models == ["m"] and engine.max_model_len == 100
    upstream.failure = EngineTimeout()
    for _ in range(TIMEOUTS_BEFORE_NOT_READY - 1):
        await engine.refresh()
        assert engine.ready
    await engine.refresh()
    assert not engine.ready
    upstream.failure = None
    await engine.refresh()
    assert engine.ready
    upstream.failure = EngineUnavailable("the inference engine is unreachable (refused)")
    await engine.refresh()
    assert not engine.ready and not engine.reachable


async def test_listeners_hear_of_every_look_and_every_read_of_the_loads_and_one_failing_stops_nobody():
    state = state_for({A: ["small"]})
    heard: list[str] = []

    def broken() -> None:
        raise RuntimeError("a listener that fails")

    state.on_change(broken)
    state.on_change(lambda: heard.append("changed"))
    await state.refresh()
    assert heard == ["changed"]
    await state.scrape_all()
    assert heard == ["changed", "changed"]
    assert state.ready
