"""Messages and Responses streams are sessions too: ids, resume, cancel, and endings in their own shapes.

The gateway under real uvicorn in front of the fake engine, which streams vLLM's Messages and
Responses events (``tests/support/fake_protocols.py``) with the text ``t0 t1 ...``, so what a
client received is known exactly. The same with the real engine and the official SDKs:
``tests/gateway/protocols/anthropic/test_anthropic_sdk.py``, ``.../responses/test_responses_sdk.py``.
"""

from __future__ import annotations

import asyncio

import orjson

from tests.support.sse_client import Event, fresh_client, read_stream
from tests.support.waiting import until

MESSAGES = "/v1/messages"
RESPONSES = "/v1/responses"
WHOLE = "".join(f"t{i} " for i in range(40))


def messages_body(tokens: int = 40, **extra) -> dict:
    return {"model": "fake-model", "max_tokens": tokens, "stream": True, "temperature": 0,
            "messages": [{"role": "user", "content": "tell me"}], **extra}


def responses_body(tokens: int = 40, **extra) -> dict:
    return {"model": "fake-model", "input": "tell me", "max_output_tokens": tokens, "stream": True,
            "temperature": 0, **extra}


def kinds(events: list[Event]) -> list[str]:
    return [event.json["type"] for event in events]


def text_of(events: list[Event]) -> str:
    """The text of a Messages or a Responses stream, from its deltas."""
    parts = []
    for event in events:
        data = event.json
        if data["type"] == "content_block_delta":
            parts.append(data["delta"].get("text", ""))
        elif data["type"] == "response.output_text.delta":
            parts.append(data["delta"])
    return "".join(parts)


async def test_a_messages_stream_has_event_ids_and_a_dropped_one_resumes_with_nothing_repeated(gateway, fake_engine):
    fake_engine.chunk_delay = 0.01
    async with gateway() as (base, app), fresh_client(base) as client:
        body = messages_body(session_id="story-a")
        first = await read_stream(client, "POST", MESSAGES, json=body, stop_after=8)  # the client drops
        assert first.status == 200 and first.session_id == "story-a"
        assert [event.id for event in first.events] == [f"story-a:{i}" for i in range(8)]
        rest = await read_stream(client, "POST", MESSAGES, json=body, headers={"Last-Event-ID": first.last_id})
        again = await read_stream(client, "GET", "/v1/sessions/story-a/events")  # the browser's way, from the start
    whole = first.events + rest.events
    assert [event.index for event in whole] == list(range(len(whole)))
    assert kinds(whole)[:2] == ["message_start", "content_block_start"] and kinds(whole)[-1] == "message_stop"
    assert text_of(whole) == WHOLE  # nothing repeated, nothing missing
    assert [(e.id, e.data) for e in again.events] == [(e.id, e.data) for e in whole]
    assert fake_engine.streams_started == 1  # the resume did not ask the engine again


async def test_a_cancelled_messages_stream_ends_in_anthropics_shape(gateway, fake_engine):
    fake_engine.chunk_delay = 0.02
    async with gateway() as (base, app), fresh_client(base) as client:
        reading = asyncio.create_task(read_stream(client, "POST", MESSAGES, json=messages_body(400, session_id="m-c")))
        await until(lambda: (session := app.state.sessions.local("local", "m-c")) is not None
                    and session.log.next_index >= 5, what="the session's fifth event")
        cancel = await client.post("/v1/cancel/m-c")
        got = await reading
    assert cancel.json()["cancelled"] is True and cancel.json()["status"] == "cancelled"
    assert kinds(got.events)[-2:] == ["message_delta", "message_stop"]
    assert got.events[-2].json["delta"]["stop_reason"] == "cancelled"
    # Its usage is cumulative (the SDKs take it as the total): the tokens the client received,
    # one per delta from the fake engine, not 0.
    deltas = kinds(got.events).count("content_block_delta")
    assert deltas >= 3 and got.events[-2].json["usage"]["output_tokens"] == deltas
    assert not any(event.data == "[DONE]" or "choices" in event.data for event in got.events)  # no OpenAI chunk
    assert got.indices == list(range(len(got.events)))


async def test_a_messages_stream_whose_engine_breaks_ends_with_anthropics_error_event(gateway, fake_engine):
    fake_engine.mode = "break_mid_stream"
    async with gateway() as (base, app), fresh_client(base) as client:
        got = await read_stream(client, "POST", MESSAGES, json=messages_body(20, temperature=0.7))
    error = got.events[-1].json
    assert error["type"] == "error" and error["error"]["type"] == "api_error"
    assert error["error"]["message"].startswith("the inference engine")  # (cut as its chunk was being sent)
    assert text_of(got.events) == "".join(f"t{i} " for i in range(10))  # (sampled: not continued elsewhere)
    assert not any(event.data == "[DONE]" for event in got.events)


async def test_a_responses_stream_is_a_session_named_by_its_response_id(gateway, fake_engine):
    fake_engine.chunk_delay = 0.01
    async with gateway() as (base, app), fresh_client(base) as client:
        first = await read_stream(client, "POST", RESPONSES, json=responses_body(), stop_after=3)
        response_id = first.events[0].json["response"]["id"]
        assert first.session_id == response_id and first.events[0].id == f"{response_id}:0"
        async def stopped() -> bool:  # the stream was cut: a session nobody named stops
            return (await client.get(f"{RESPONSES}/{response_id}")).json()["status"] != "in_progress"

        await until(stopped, what="the cut response to stop", interval=0.02)
        stored = (await client.get(f"{RESPONSES}/{response_id}")).json()
        replayed = await read_stream(client, "GET", f"{RESPONSES}/{response_id}?stream=true&starting_after=2")
        by_post = await read_stream(client, "POST", RESPONSES, json=responses_body(),
                                    headers={"Last-Event-ID": f"{response_id}:2"})
    # The client left: the generation stopped (as a plain OpenAI stream would), its end says so.
    assert stored["status"] == "cancelled"
    assert [event.json["sequence_number"] for event in replayed.events] == list(range(3, 3 + len(replayed.events)))
    assert kinds(replayed.events)[-1] == "response.cancelled"
    assert [(e.id, e.data) for e in by_post.events] == [(e.id, e.data) for e in replayed.events]


async def test_a_responses_stream_read_to_its_end_is_stored_and_replayable(gateway, fake_engine):
    async with gateway() as (base, app), fresh_client(base) as client:
        got = await read_stream(client, "POST", RESPONSES, json=responses_body(12))
        response_id = got.session_id
        stored = (await client.get(f"{RESPONSES}/{response_id}")).json()
        replayed = await read_stream(client, "GET", f"{RESPONSES}/{response_id}?stream=true")
    assert kinds(got.events)[-1] == "response.incomplete" and text_of(got.events) == "".join(f"t{i} " for i in range(12))
    assert [event.json["sequence_number"] for event in got.events] == got.indices == list(range(len(got.events)))
    assert stored["status"] == "incomplete" and stored["output"][0]["content"][0]["text"] == text_of(got.events)
    assert [(e.id, e.data) for e in replayed.events] == [(e.id, e.data) for e in got.events]


def item_done(events: list[Event]) -> list[dict]:
    """The items of a Responses stream's ``response.output_item.done`` events."""
    return [event.json["item"] for event in events if event.json["type"] == "response.output_item.done"]


async def test_the_item_a_response_cut_by_its_output_limit_was_generating_closes_incomplete(gateway, fake_engine):
    """vLLM closes the cut message with ``status: completed`` and then ends the response ``incomplete``;
    the stream's ``response.output_item.done`` said ``completed`` while the final response, and the stored
    one, said the same item was ``incomplete`` (OpenAI's status of an item cut short)."""
    async with gateway() as (base, app), fresh_client(base) as client:
        got = await read_stream(client, "POST", RESPONSES, json=responses_body(12))
        stored = (await client.get(f"{RESPONSES}/{got.session_id}")).json()
    final = got.events[-1].json["response"]
    assert kinds(got.events)[-2:] == ["response.output_item.done", "response.incomplete"]
    assert [item["status"] for item in item_done(got.events)] == ["incomplete"]
    assert item_done(got.events) == final["output"] == stored["output"]
    assert [event.json["sequence_number"] for event in got.events] == got.indices == list(range(len(got.events)))


async def test_an_item_closed_just_before_its_engine_died_is_incomplete_in_the_failed_response(gateway, fake_engine):
    """The engine sent the item's ``response.output_item.done`` (``completed``) and died before its
    terminal event; no engine can go on (sampled): the response ``failed``, and its item, which the
    stream said was ``completed``, was missing from the failed response and the stored one."""
    fake_engine.mode = "break_before_end"
    async with gateway() as (base, app), fresh_client(base) as client:
        got = await read_stream(client, "POST", RESPONSES, json=responses_body(12, temperature=0.7))
        stored = (await client.get(f"{RESPONSES}/{got.session_id}")).json()
    final = got.events[-1].json["response"]
    assert kinds(got.events)[-3:] == ["response.output_item.done", "error", "response.failed"]
    assert final["status"] == "failed" and stored == final
    assert [item["status"] for item in item_done(got.events)] == ["incomplete"]
    assert item_done(got.events) == final["output"]
    assert final["output"][0]["content"][0]["text"] == text_of(got.events) == "".join(f"t{i} " for i in range(12))
    assert [event.json["sequence_number"] for event in got.events] == got.indices == list(range(len(got.events)))


async def test_a_cancel_after_the_item_closed_cancels_it_with_the_response(gateway, fake_engine):
    """A cancel that lands after the engine closed the item, before its terminal event: the stream said
    the item ``completed`` and then the response ``cancelled`` without it."""
    fake_engine.end_hold = asyncio.Event()
    try:
        async with gateway() as (base, app), fresh_client(base) as client:
            reading = asyncio.create_task(read_stream(client, "POST", RESPONSES, json=responses_body(12)))
            await until(lambda: fake_engine.received, what="the engine's request")
            response_id = orjson.loads(fake_engine.received[-1].body)["request_id"]
            # Every event but the terminal one has reached the gateway: the fake engine's 4 opening events,
            # 12 deltas, and the text's, the part's and the item's done events (it holds only its terminal one).
            await until(lambda: (session := app.state.sessions.local("local", response_id)) is not None
                        and session.dialect.run.next_sequence == 4 + 12 + 3, what="the item's done event at the gateway")
            cancel = await client.post(f"/v1/cancel/{response_id}")
            got = await reading
            stored = (await client.get(f"{RESPONSES}/{response_id}")).json()
    finally:
        fake_engine.end_hold.set()
    assert cancel.json()["cancelled"] is True
    final = got.events[-1].json["response"]
    assert kinds(got.events)[-2:] == ["response.output_item.done", "response.cancelled"]
    assert final["status"] == "cancelled" and stored == final
    assert [item["status"] for item in item_done(got.events)] == ["incomplete"] and item_done(got.events) == final["output"]
    assert [event.json["sequence_number"] for event in got.events] == got.indices == list(range(len(got.events)))
