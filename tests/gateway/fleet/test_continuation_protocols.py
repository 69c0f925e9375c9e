"""Messages and Responses streams survive their engine too, each in its own events.

Fake engines (``fakes.py``) that die or stall mid-stream, streaming vLLM's Messages and
Responses events. A greedy stream whose engine dies goes on on the other engine: one stream,
contiguous ids, the same text as an uninterrupted run, the message or response keeping the id
and item ids clients already have. When no engine can go on (a sampled run, or a replay that
generates something else), the stream ends in its own protocol's error events, never an OpenAI
chunk. The same with two real engines: ``test_real_engines.py``.
"""

from __future__ import annotations

import httpx
import orjson
import pytest

from tests.gateway.fleet.conftest import serving
from tests.gateway.fleet.fakes import fake_fleet, fleet_settings
from tests.support.sse_client import parse_sse

TOKENS = 12
UNINTERRUPTED = "".join(f"t{i} " for i in range(TOKENS))
MESSAGES, RESPONSES = "/v1/messages", "/v1/responses"


def settings(engines, **values):
    # Round robin: the first stream goes to the first engine (the one that dies).
    return fleet_settings(engines, session_store="memory", routing_policy="round_robin", **values)


def body(path: str, **extra) -> dict:
    if path == MESSAGES:
        return {"model": "fake-model", "max_tokens": TOKENS, "stream": True, "temperature": 0,
                "messages": [{"role": "user", "content": "tell me"}], **extra}
    return {"model": "fake-model", "input": "tell me", "max_output_tokens": TOKENS, "stream": True,
            "temperature": 0, **extra}


def events_of(response: httpx.Response) -> list[dict]:
    events, _ = parse_sse(response.text.splitlines())
    assert [event.index for event in events] == list(range(len(events)))  # one stream: contiguous ids
    return [event.json for event in events]


def text_of(events: list[dict]) -> str:
    return "".join(e["delta"].get("text", "") if e["type"] == "content_block_delta" else e["delta"]
                   for e in events if e["type"] in ("content_block_delta", "response.output_text.delta"))


def continuations(client, outcome: str, engine: str) -> float:
    registry = client.app.state.gateway.metrics.registry
    return registry.get_sample_value("gateway_engine_continuations_total",
                                     {"engine": engine, "outcome": outcome}) or 0.0


@pytest.mark.parametrize("die_after", [0, 5])
async def test_a_greedy_messages_stream_whose_engine_dies_continues_with_nothing_repeated(die_after):
    async with fake_fleet(2) as (dying, survivor), serving(settings([dying, survivor])) as client:
        dying.die_after = die_after
        events = events_of(await client.post(MESSAGES, json=body(MESSAGES, session_id="m-1")))
        assert text_of(events) == UNINTERRUPTED
        kinds = [event["type"] for event in events]
        assert kinds.count("message_start") == 1 and kinds.count("content_block_start") == 1
        assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
        assert events[0]["message"]["id"] == f"chatcmpl-{dying.received[-1].headers['x-request-id']}"
        assert events[-2]["usage"]["output_tokens"] == TOKENS
        assert survivor.received[-1].json == dying.received[-1].json  # the same request again
        assert continuations(client, "continued", survivor.base_url) == 1


@pytest.mark.parametrize("die_after", [0, 5])
async def test_a_greedy_responses_stream_whose_engine_dies_continues_as_one_response(die_after):
    async with fake_fleet(2) as (dying, survivor), serving(settings([dying, survivor])) as client:
        dying.die_after = die_after
        response = await client.post(RESPONSES, json=body(RESPONSES))
        events = events_of(response)
        assert text_of(events) == UNINTERRUPTED
        assert [event["sequence_number"] for event in events] == list(range(len(events)))
        kinds = [event["type"] for event in events]
        assert kinds.count("response.created") == 1 and kinds.count("response.output_item.added") == 1
        assert kinds[-1] == "response.incomplete"  # cut by its max_output_tokens, as the fake engine answers
        items = {e.get("item_id") or e.get("item", {}).get("id") for e in events if e["type"].startswith(
            ("response.output", "response.content"))}
        final = events[-1]["response"]
        assert len(items) == 1 and final["output"][0]["id"] in items  # the item id clients knew, to the end
        assert final["output"][0]["content"][0]["text"] == UNINTERRUPTED
        assert final["id"] == events[0]["response"]["id"] == response.headers["x-session-id"]
        stored = (await client.get(f"{RESPONSES}/{final['id']}")).json()
        assert stored["output"] == final["output"] and stored["status"] == "incomplete"
        assert continuations(client, "continued", survivor.base_url) == 1


async def test_a_messages_replay_that_generates_something_else_ends_with_anthropics_error_event():
    async with fake_fleet(2) as (dying, other), serving(settings([dying, other])) as client:
        dying.die_after, other.text_prefix = 4, "u"
        events = events_of(await client.post(MESSAGES, json=body(MESSAGES)))
    assert text_of(events) == "t0 t1 t2 t3 "
    assert events[-1]["type"] == "error" and "could not be continued exactly" in events[-1]["error"]["message"]
    assert "message_stop" not in [event["type"] for event in events]


async def test_a_sampled_responses_stream_is_not_continued_and_fails_as_a_response():
    async with fake_fleet(2) as (dying, other), serving(settings([dying, other])) as client:
        dying.die_after = 3
        events = events_of(await client.post(RESPONSES, json=body(RESPONSES, temperature=0.7)))
        assert [event["type"] for event in events][-2:] == ["error", "response.failed"]
        assert events[-1]["response"]["error"]["code"] == "stream_interrupted"
        assert [event["sequence_number"] for event in events] == list(range(len(events)))
        assert other.requests == 0 and continuations(client, "not_continuable", "none") == 1
        stored = (await client.get(f"{RESPONSES}/{events[0]['response']['id']}")).json()
        assert stored["status"] == "failed"


async def test_a_stalled_messages_stream_continues_after_the_chunk_timeout():
    async with fake_fleet(2) as (stalling, survivor), \
            serving(settings([stalling, survivor], upstream_chunk_timeout=0.5)) as client:
        stalling.stall_after = 4
        events = events_of(await client.post(MESSAGES, json=body(MESSAGES)))
    assert text_of(events) == UNINTERRUPTED and events[-1]["type"] == "message_stop"
    assert orjson.dumps(events).count(b'"message_start"') == 1


async def test_a_greedy_responses_stream_whose_engine_died_after_closing_its_item_closes_it_once():
    """The engine closed the item (``response.output_item.done``) and died before its terminal event. The
    gateway holds an item's done event until the next event says how the response goes on; the replay on
    the other engine closes the item itself: one done event, numbered on from what clients have."""
    async with fake_fleet(2) as (dying, survivor), serving(settings([dying, survivor])) as client:
        dying.mode = "break_before_end"
        events = events_of(await client.post(RESPONSES, json=body(RESPONSES)))
        assert text_of(events) == UNINTERRUPTED
        assert [event["sequence_number"] for event in events] == list(range(len(events)))
        kinds = [event["type"] for event in events]
        assert kinds[-2:] == ["response.output_item.done", "response.incomplete"]
        assert kinds.count("response.output_item.done") == 1
        final = events[-1]["response"]
        assert events[-2]["item"] == final["output"][0] and final["output"][0]["status"] == "incomplete"
        assert continuations(client, "continued", survivor.base_url) == 1
