"""A stream its reservation covers is charged at most that reservation, whatever events it counted.

In process: the meter with the in-process limiter, the request context, the metered sink over
a sink that keeps nothing. A covered stream (granted in full, ``max_tokens`` for one choice)
counts its framing events (the role's, the finish's, ``[DONE]``) past its reservation without
asking for more; when it ends without the engine's usage (a client gone, an engine dead after
its last token), what it counted must not be charged beyond what it reserved: the engine could
not have generated more.
"""

from __future__ import annotations

import orjson

from gateway.http.auth import Principal
from gateway.http.context import RequestContext
from gateway.relay.metering import Meter, metered_sink, settle_call
from gateway.tenancy.limits.limiter import Limiter
from gateway.tenancy.limits.local import LocalLimits
from gateway.tenancy.model import Limits
from gateway.tenancy.usage.ledger import UsageLedger

CHAT = "/v1/chat/completions"
BUDGET = 1000
PROMPT_BOUND = 34  # "hi" in one message (tenancy.limits.demand: 2 bytes + 16 + 8 per message + 8)
MAX_TOKENS = 4
TOKEN = b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n'
ROLE = b'data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n'
FINISH = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}\n\n'
DONE = b"data: [DONE]\n\n"


class Discard:
    counts_events = True
    first_event = None

    async def write(self, block: bytes) -> None:
        pass


def request_for(principal: Principal, **fields) -> tuple[RequestContext, bytes]:
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields})
    request = RequestContext("r", principal=principal)
    request.keep_parsed(body, orjson.loads(body))
    return request, body


async def budget_left_after(meter: Meter, principal: Principal) -> int:
    """What the budget has left once one more request of MAX_TOKENS has reserved its share."""
    request, body = request_for(principal, max_tokens=MAX_TOKENS)
    metered = await meter.admit(request, CHAT, body)
    left = metered.reservation.rate.budget_remaining
    await settle_call(request, answered=False)
    return left


async def test_a_covered_stream_without_usage_is_charged_no_more_than_it_reserved():
    principal = Principal(key_id="key_a", role="app", limits=Limits(budget_tokens=BUDGET, budget_period="total"))
    meter = Meter(Limiter(local=LocalLimits()), UsageLedger(None))  # type: ignore[arg-type]  # (never flushed)
    request, body = request_for(principal, max_tokens=MAX_TOKENS, stream=True)
    metered = await meter.admit(request, CHAT, body, stream=True)
    assert metered.covered and metered.reservation.granted == PROMPT_BOUND + MAX_TOKENS
    sink = metered_sink(Discard(), request)
    for block in (ROLE, TOKEN * MAX_TOKENS, FINISH, DONE):  # 7 events for 4 tokens
        await sink.write(block)
    await settle_call(request)  # no usage: the client left before the usage chunk
    reserved = PROMPT_BOUND + MAX_TOKENS
    assert await budget_left_after(meter, principal) == BUDGET - reserved - reserved  # not 3 tokens fewer


async def test_an_uncovered_stream_without_usage_is_charged_what_it_counted():
    # No output cap: its events are its tokens as far as the gateway knows (each event is one decode step).
    principal = Principal(key_id="key_b", role="app", limits=Limits(budget_tokens=BUDGET, budget_period="total"))
    meter = Meter(Limiter(local=LocalLimits()), UsageLedger(None))  # type: ignore[arg-type]
    request, body = request_for(principal, stream=True)
    metered = await meter.admit(request, CHAT, body, stream=True)
    assert not metered.covered
    sink = metered_sink(Discard(), request)
    for block in (ROLE, TOKEN * MAX_TOKENS, FINISH, DONE):
        await sink.write(block)
    await settle_call(request)
    assert await budget_left_after(meter, principal) == BUDGET - (PROMPT_BOUND + 7) - (PROMPT_BOUND + MAX_TOKENS)
