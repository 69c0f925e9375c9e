"""Which thinking budgets reach the engine (``anthropic.thinking``), on fake engine answers."""

from __future__ import annotations

import asyncio

from gateway.engines.errors import EngineHTTPError, EngineUnavailable
from gateway.protocols.anthropic.thinking import HEADER, RECHECK_SECONDS, ThinkingBudgets

REFUSAL = ("thinking_token_budget is set but reasoning_config is not configured. Please set --reasoning-parser "
           "and/or --reasoning-config to use thinking_token_budget.")


class Engine:
    def __init__(self, answer) -> None:
        self.answer = answer
        self.asked: list[dict] = []

    async def post_json(self, path: str, payload: dict) -> dict:
        self.asked.append(payload)
        await asyncio.sleep(0)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def enabled(**extra) -> dict:
    return {"thinking": {"type": "enabled", "budget_tokens": 2048, **extra}}


async def test_an_engine_that_refuses_budgets_gets_adaptive_thinking_and_is_asked_once():
    engine = Engine(EngineHTTPError(400, REFUSAL, b"{}"))
    budgets = ThinkingBudgets()
    payloads = [enabled(display="summarized") for _ in range(3)]
    headers = await asyncio.gather(*(budgets.fit(payload, "m", engine.post_json) for payload in payloads))
    assert headers == [(HEADER, "budget_tokens 2048")] * 3
    assert all(payload["thinking"] == {"type": "adaptive", "display": "summarized"} for payload in payloads)
    assert len(engine.asked) == 1 and engine.asked[0]["max_tokens"] == 1  # one question, one token


async def test_an_engine_that_takes_budgets_gets_them_and_other_settings_pass():
    engine = Engine({"choices": []})
    budgets = ThinkingBudgets()
    payload = enabled()
    assert await budgets.fit(payload, "m", engine.post_json) is None and payload == enabled()
    for other in ({"thinking": {"type": "adaptive"}}, {"thinking": {"type": "disabled"}}, {}):
        assert await budgets.fit(dict(other), "m", engine.post_json) is None
    assert len(engine.asked) == 1


async def test_an_engine_that_cannot_say_keeps_the_budget_and_is_asked_again():
    engine = Engine(EngineUnavailable())
    budgets = ThinkingBudgets()
    for _ in range(2):
        payload = enabled()
        assert await budgets.fit(payload, "m", engine.post_json) is None and payload == enabled()
    assert len(engine.asked) == 2


async def test_the_answer_is_asked_again_after_a_while():
    now = [0.0]
    engine = Engine(EngineHTTPError(400, REFUSAL, b"{}"))
    budgets = ThinkingBudgets(clock=lambda: now[0])
    assert await budgets.fit(enabled(), "m", engine.post_json) is not None
    engine.answer = {"choices": []}  # restarted with a reasoning parser
    assert await budgets.fit(enabled(), "m", engine.post_json) is not None
    now[0] = RECHECK_SECONDS + 1
    assert await budgets.fit(enabled(), "m", engine.post_json) is None and len(engine.asked) == 2
