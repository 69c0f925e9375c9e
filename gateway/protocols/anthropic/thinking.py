"""Extended thinking with a budget on an engine that cannot count one: the budget is dropped, not the request.

Claude Code sends ``thinking: {"type": "enabled", "budget_tokens": N}`` when its user turns
extended thinking on. vLLM's Messages route turns the budget into ``thinking_token_budget``,
which only an engine started with a reasoning parser (``--reasoning-parser qwen3``) can
enforce; any other engine refuses the request (a 400 that names vLLM's flags, or, streamed, a
200 whose only event is an ``error`` with a pydantic dump), and the agent stops. Qwen3 thinks
or not by its chat template (hybrid models think unless told not to; Instruct-2507 never does),
so the budget is the only part of the setting such an engine cannot honour. Anthropic itself
treats the budget as a target, not a promise, and calls it deprecated in favour of
``{"type": "adaptive"}`` (the model chooses how long to think), which vLLM accepts on any
engine. So, on an engine without a reasoning parser, the gateway sends ``adaptive`` instead
and says so in ``X-Gateway-Thinking-Budget-Ignored: budget_tokens <N>``; an engine with one
gets the budget unchanged.

Whether an engine can: asked once per model (re-asked after :data:`RECHECK_SECONDS`, so an
engine restarted with a parser is noticed) with the smallest request that carries a budget:
a one-token chat completion with ``thinking_token_budget: 1`` (the Messages route takes no
budget under 1024 nor one at or above ``max_tokens``, which would let the question generate
a thousand tokens; both routes meet the same check in vLLM's engine). An answer that says
neither (an engine down) keeps the budget: the request itself then meets the engine's own
answer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from gateway.engines.errors import EngineError, EngineHTTPError

HEADER = "x-gateway-thinking-budget-ignored"
RECHECK_SECONDS = 300.0
_REFUSAL = "thinking_token_budget"  # in vLLM's refusal: "thinking_token_budget is set but reasoning_config ..."

PostJson = Callable[[str, dict], Awaitable[dict]]


def asked_budget(payload: dict) -> int | None:
    """The budget ``payload``'s extended thinking asks for, if it asks for one."""
    thinking = payload.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") == "enabled":
        budget = thinking.get("budget_tokens")
        return budget if isinstance(budget, int) and not isinstance(budget, bool) else None
    return None


async def probe(post_json: PostJson, model: str) -> bool | None:
    """Whether the engine takes a thinking budget for ``model`` (None: its answer says neither)."""
    request = {"model": model, "max_tokens": 1, "messages": [{"role": "user", "content": "ok"}],
               "thinking_token_budget": 1}
    try:
        await post_json("/v1/chat/completions", request)
    except EngineHTTPError as error:
        return False if error.upstream_status == 400 and _REFUSAL in error.message else None
    except EngineError:
        return None
    return True


class ThinkingBudgets:
    """Which models' engines take a thinking budget, as last asked."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._known: dict[str, tuple[bool, float]] = {}  # model -> (takes a budget, when asked)
        self._asking: dict[str, asyncio.Task] = {}  # one question per model at a time

    async def takes_budget(self, model: str, post_json: PostJson) -> bool | None:
        known = self._known.get(model)
        if known is not None and self._clock() - known[1] < RECHECK_SECONDS:
            return known[0]
        task = self._asking.get(model)
        if task is None:
            task = self._asking[model] = asyncio.ensure_future(probe(post_json, model))
            task.add_done_callback(lambda _: self._asking.pop(model, None))
        answer = await asyncio.shield(task)  # (a client leaving does not cancel the others' question)
        if answer is not None:
            self._known[model] = (answer, self._clock())
        return answer

    async def fit(self, payload: dict, model: str, post_json: PostJson) -> tuple[str, str] | None:
        """Replace a budget the engine cannot take with ``adaptive``; the response header saying so, if done."""
        budget = asked_budget(payload)
        if budget is None or await self.takes_budget(model, post_json) is not False:
            return None
        thinking = payload["thinking"]
        payload["thinking"] = {"type": "adaptive", **({"display": thinking["display"]} if "display" in thinking
                                                       else {})}
        return HEADER, f"budget_tokens {budget}"
