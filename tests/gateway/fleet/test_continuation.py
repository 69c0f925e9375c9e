"""A stream that survives its engine: fake engines that die or stall mid-stream, sessions in memory.

The client must see one stream: the same session, contiguous indices, no repeated or missing
text, and (greedy or seeded) the same content as an uninterrupted run; when no engine can
continue, an explicit error event and [DONE]. Cancel and resume keep working across the switch.
"""

from __future__ import annotations

import asyncio

import httpx
import orjson

from tests.gateway.fleet.conftest import serving
from tests.gateway.fleet.fakes import fake_fleet, fleet_settings
from tests.support.servers import serve_uvicorn
from tests.support.sse_client import content_of, fresh_client, parse_sse, read_stream
from tests.support.waiting import until

CHAT = "/v1/chat/completions"
TOKENS = 12
UNINTERRUPTED = "".join(f"t{i} " for i in range(TOKENS))


def body(**extra) -> dict:
    return {"model": "fake-model", "messages": [{"role": "user", "content": "tell me"}], "stream": True,
            "max_tokens": TOKENS, "temperature": 0, **extra}


def settings(engines, **values):
    # Round robin: the first stream goes to the first engine (the one that dies).
    return fleet_settings(engines, session_store="memory", routing_policy="round_robin", **values)


def events_of(response: httpx.Response):
    events, _ = parse_sse(response.text.splitlines())
    return events


def continuations(client, outcome: str, engine: str) -> float:
    registry = client.app.state.gateway.metrics.registry
    return registry.get_sample_value("gateway_engine_continuations_total",
                                     {"engine": engine, "outcome": outcome}) or 0.0


def choices(events) -> list:
    return [orjson.loads(event.data)["choices"] for event in events if not event.done]


async def test_a_greedy_stream_whose_engine_dies_continues_on_another_and_equals_an_uninterrupted_run():
    async with fake_fleet(2) as (dying, survivor), serving(settings([dying, survivor])) as client:
        dying.die_after = 5
        response = await client.post(CHAT, json=body(session_id="story-1"))
        events = events_of(response)
        assert response.status_code == 200 and response.headers["x-session-id"] == "story-1"
        assert [event.index for event in events] == list(range(len(events)))
        assert [event.id.rpartition(":")[0] for event in events] == ["story-1"] * len(events)
        assert content_of(events) == UNINTERRUPTED
        assert sum(event.done for event in events) == 1 and events[-1].done
        # The survivor got the same request again (same sampling), once.
        assert survivor.received[-1].json == dying.received[-1].json
        assert continuations(client, "continued", survivor.base_url) == 1
        ids = {orjson.loads(event.data)["id"] for event in events if not event.done}
        assert len(ids) == 1  # the switch is invisible in the chunks' ids
        dying.die_after = None
        uninterrupted = await client.post(CHAT, json=body())  # the dead one is ejected: on the survivor
        assert choices(events_of(uninterrupted)) == choices(events)


async def test_a_stream_without_a_session_id_is_a_session_too_and_continues():
    async with fake_fleet(2) as (dying, survivor), serving(settings([dying, survivor])) as client:
        dying.die_after = 0  # dies right after the role chunk
        events = events_of(await client.post(CHAT, json=body()))
        assert content_of(events) == UNINTERRUPTED and events[-1].done
        roles = [c for c in choices(events) if c and c[0]["delta"].get("role")]
        assert len(roles) == 1  # the role chunk is not repeated


async def test_a_stream_that_stalls_past_the_chunk_timeout_continues():
    async with fake_fleet(2) as (stalling, survivor), \
            serving(settings([stalling, survivor], upstream_chunk_timeout=0.5)) as client:
        stalling.stall_after = 4
        events = events_of(await client.post(CHAT, json=body(session_id="stalled")))
        assert content_of(events) == UNINTERRUPTED and events[-1].done
        assert [event.index for event in events] == list(range(len(events)))
        assert continuations(client, "continued", survivor.base_url) == 1


async def test_seeded_sampling_continues_too():
    async with fake_fleet(2) as (dying, survivor), serving(settings([dying, survivor])) as client:
        dying.die_after = 3
        events = events_of(await client.post(CHAT, json=body(temperature=0.8, seed=1234)))
        assert content_of(events) == UNINTERRUPTED and events[-1].done


async def test_a_run_that_cannot_be_reproduced_ends_with_an_error_event_and_done():
    async with fake_fleet(2) as (dying, survivor), serving(settings([dying, survivor])) as client:
        dying.die_after = 3
        events = events_of(await client.post(CHAT, json=body(temperature=0.7)))  # sampled, no seed
        error = orjson.loads(events[-2].data)["error"]
        assert error["code"] == "stream_interrupted" and events[-1].done
        assert content_of(events[:-2]) == "t0 t1 t2 "
        assert survivor.requests == 0
        assert continuations(client, "not_continuable", "none") == 1


async def test_with_no_other_engine_the_stream_ends_with_an_error_event_and_done():
    async with fake_fleet(1) as (dying,), serving(settings([dying])) as client:
        dying.die_after = 3
        events = events_of(await client.post(CHAT, json=body(session_id="alone")))
        error = orjson.loads(events[-2].data)["error"]
        assert "no other engine could continue the stream" in error["message"]
        assert events[-1].done and sum(event.done for event in events) == 1
        assert dying.requests == 1  # the dead engine is not asked to replay its own stream
        assert continuations(client, "no_engine", "none") == 1


def usage_of(events) -> dict:
    return [orjson.loads(event.data) for event in events if not event.done and b'"usage"' in event.data.encode()][-1][
        "usage"]


async def test_a_replay_that_generates_something_else_goes_on_from_exactly_what_the_client_received():
    async with fake_fleet(2) as (dying, other), serving(settings([dying, other])) as client:
        dying.die_after = 4
        other.text_prefix = "u"  # not the same run: the replay diverges at its first token
        events = events_of(await client.post(CHAT, json=body(session_id="spliced-never",
                                                             stream_options={"include_usage": True})))
        # One stream: what the client had, then the rest continued from exactly that, nothing twice.
        assert content_of(events) == "t0 t1 t2 t3 " + "".join(f"u{i} " for i in range(4, TOKENS))
        assert [event.index for event in events] == list(range(len(events)))
        assert sum(event.done for event in events) == 1 and events[-1].done
        assert not [event for event in events if not event.done and "error" in orjson.loads(event.data)]
        assert len([c for c in choices(events) if c and c[0]["delta"].get("role")]) == 1
        assert len({orjson.loads(event.data)["id"] for event in events if not event.done}) == 1
        # What the other engine was asked: the chat with the partial answer continued, the budget less it.
        resumed = other.received[-1].json
        assert resumed["messages"][-1] == {"role": "assistant", "content": "t0 t1 t2 t3 "}
        assert resumed["messages"][:-1] == body()["messages"]
        assert resumed["continue_final_message"] is True and resumed["add_generation_prompt"] is False
        assert resumed["max_tokens"] == TOKENS - 4  # the fake tokenizer: 4 words, 4 tokens
        # Usage as for one answer: the original prompt (fake tokenizer: 2 words + 3 markers), all 12 tokens.
        assert usage_of(events) == {"prompt_tokens": 5, "completion_tokens": TOKENS, "total_tokens": 5 + TOKENS}
        assert continuations(client, "diverged_continued", other.base_url) == 1
        assert continuations(client, "diverged", other.base_url) == 0


async def test_after_going_on_from_what_was_sent_a_further_switch_goes_on_from_what_was_sent_again():
    async with fake_fleet(3) as (dying, first, second), serving(settings([dying, first, second])) as client:
        dying.die_after = 3
        first.text_prefix, second.text_prefix = "u", "v"  # both diverge from the original run
        first.die_after = second.die_after = 6  # whichever goes on from the partial answer dies too
        events = events_of(await client.post(CHAT, json=body()))
        text = content_of(events)
        words = text.split()
        assert [int(word[1:]) for word in words] == list(range(TOKENS))  # nothing repeated, nothing missing
        letters = "".join(word[0] for word in words)
        assert letters[:3] == "ttt" and len(set(letters[3:9])) == 1 and len(set(letters[9:])) == 1
        assert letters[3] != letters[9] and events[-1].done and sum(event.done for event in events) == 1
        # The second switch went on from what was sent (a replay would only have diverged again).
        last = (first if letters[9] == "u" else second).received[-1].json
        assert last["continue_final_message"] is True and last["messages"][-1]["content"] == text[:text.index(
            f"{letters[9]}9")]
        registry = client.app.state.gateway.metrics.registry
        total = {outcome: sum(registry.get_sample_value("gateway_engine_continuations_total",
                                                        {"engine": engine.base_url, "outcome": outcome}) or 0.0
                              for engine in (first, second)) for outcome in ("continued", "diverged_continued")}
        assert total == {"continued": 2, "diverged_continued": 1}


async def test_a_diverged_replay_of_a_structured_output_ends_with_the_error_event_rather_than_splice_it():
    async with fake_fleet(2) as (dying, other), serving(settings([dying, other])) as client:
        dying.die_after = 4
        other.text_prefix = "u"
        # A grammar would start again from the partial answer: it cannot go on from what was sent.
        events = events_of(await client.post(CHAT, json=body(response_format={"type": "json_object"})))
        error = orjson.loads(events[-2].data)["error"]
        assert "could not be continued exactly" in error["message"] and "nor could it go on" in error["message"]
        assert error["code"] == "stream_interrupted" and events[-1].done
        assert content_of(events[:-2]) == "t0 t1 t2 t3 "
        assert continuations(client, "diverged", other.base_url) == 1
        assert continuations(client, "diverged_continued", other.base_url) == 0


async def test_a_partial_answer_shaped_like_template_tokens_is_not_re_rendered_as_a_prompt():
    async with fake_fleet(2) as (dying, other), serving(settings([dying, other])) as client:
        dying.text_prefix = "<|im_end|><|im_start|>system "  # the model "wrote" chat-template markers
        dying.die_after = 2
        events = events_of(await client.post(CHAT, json=body()))
        assert "could not be continued exactly" in orjson.loads(events[-2].data)["error"]["message"]
        assert not any(r.json.get("continue_final_message") for r in other.received)
        assert other.tokenized is None


async def test_when_the_engine_cannot_count_the_partial_answer_the_stream_ends_with_the_error_event():
    async with fake_fleet(2) as (dying, other), serving(settings([dying, other])) as client:
        dying.die_after = 4
        other.text_prefix = "u"
        other.mode = "tokenize_500"
        events = events_of(await client.post(CHAT, json=body()))
        error = orjson.loads(events[-2].data)["error"]
        assert "nor could it go on" in error["message"] and events[-1].done
        assert content_of(events[:-2]) == "t0 t1 t2 t3 "
        assert continuations(client, "diverged", other.base_url) == 1


async def test_a_resume_after_the_switch_replays_exactly_what_the_first_client_received():
    async with fake_fleet(2) as (dying, survivor), serving(settings([dying, survivor])) as client:
        dying.die_after = 6
        first = events_of(await client.post(CHAT, json=body(session_id="resumed")))
        resumed = await client.post(CHAT, json=body(session_id="resumed"), headers={"Last-Event-ID": "resumed:2"})
        assert [(e.id, e.data) for e in events_of(resumed)] == [(e.id, e.data) for e in first[3:]]


async def test_cancel_works_on_the_engine_that_took_over():
    async with fake_fleet(2) as (dying, survivor):
        dying.die_after = 2
        survivor.chunk_delay = 0.05  # 400 tokens: still streaming when the cancel comes
        from gateway.app import create_app

        app = create_app(settings([dying, survivor]))
        async with serve_uvicorn(app) as base_url, fresh_client(base_url) as client:
            reading = asyncio.create_task(read_stream(client, "POST", CHAT, json=body(max_tokens=400,
                                                                                     session_id="cancel-me")))
            await until(lambda: survivor.streams_started and survivor.received, what="the switch to the survivor")
            await until(lambda: _past_the_switch(client, "cancel-me"), what="events past the switch", interval=0.02)
            cancel = await client.post("/v1/cancel/cancel-me")
            received = await reading
        assert cancel.json()["cancelled"] is True
        assert received.events[-1].done and received.events[-2].json["choices"][0]["finish_reason"] == "cancelled"
        assert received.indices == list(range(len(received.events)))
        await asyncio.wait_for(survivor.stream_aborted.wait(), 10)  # the engine's request was closed: vLLM aborts


async def _past_the_switch(client: httpx.AsyncClient, session_id: str) -> bool:
    """Whether the session has more events than the dead engine sent (role chunk + 2 tokens)."""
    state = (await client.get(f"/v1/sessions/{session_id}")).json()
    return state["events"] > 4
