"""The official openai SDK's Responses API against the gateway and the real engine.

Greedy decoding (temperature 0; ``ignore_eos`` for fixed lengths) makes the tiny model's
gibberish deterministic, so a run can be compared with another run of the same request,
or with the engine answering the same request directly.
"""

from __future__ import annotations

import contextlib
import random
import time

import httpx
import openai
import pytest

from gateway.app import create_app
from tests.gateway.protocols.conftest import (
    KEY_A,
    KEY_B,
    RUNNING,
    engine_post,
    headers,
    surface_settings,
    wait_for_metric,
)
from tests.support.servers import run_uvicorn

pytestmark = [pytest.mark.integration, pytest.mark.engine]

FINAL = ("completed", "incomplete", "failed", "cancelled")


@pytest.fixture
def sdk(gateway_url) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway_url + "/v1", api_key=KEY_A, max_retries=0)


@pytest.fixture
def other_sdk(gateway_url) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway_url + "/v1", api_key=KEY_B, max_retries=0)


def greedy(engine, tokens: int, **extra) -> dict:
    return dict(model=engine.model, input="Tell me about lighthouses.", max_output_tokens=tokens, temperature=0,
                extra_body={"ignore_eos": True}, **extra)


def until_final(sdk, response_id: str, timeout: float = 90.0):
    deadline = time.monotonic() + timeout
    while True:
        got = sdk.responses.retrieve(response_id)
        if got.status in FINAL:
            return got
        assert time.monotonic() < deadline, f"still {got.status} after {timeout}s"
        time.sleep(0.1)


def delta_text(events) -> str:
    return "".join(e.delta for e in events if e.type == "response.output_text.delta")


def test_create_plain_is_stored_and_retrieved_as_answered(sdk, vllm_engine):
    reply = sdk.responses.create(**greedy(vllm_engine, 8))
    assert reply.id.startswith("resp_") and reply.object == "response"
    assert reply.status == "incomplete" and reply.incomplete_details.reason == "max_output_tokens"
    assert [(item.type, item.status) for item in reply.output] == [("message", "incomplete")]  # the cut message
    assert reply.usage.output_tokens == 8 and reply.output_text
    assert sdk.responses.retrieve(reply.id).model_dump() == reply.model_dump()


def test_same_answer_as_the_engine_gives_directly(sdk, vllm_engine):
    reply = sdk.responses.create(**greedy(vllm_engine, 12))
    body = greedy(vllm_engine, 12)
    direct = engine_post(vllm_engine, "/v1/responses", {**body.pop("extra_body"), **body, "store": False}).json()
    assert reply.output_text == direct["output"][0]["content"][0]["text"]
    assert reply.usage.input_tokens == direct["usage"]["input_tokens"]


def test_a_client_chosen_request_id_never_names_the_response(sdk, vllm_engine):
    body = greedy(vllm_engine, 4)
    first = sdk.responses.create(**{**body, "extra_body": {**body["extra_body"], "request_id": "resp_chosen"}})
    second = sdk.responses.create(**{**body, "extra_body": {**body["extra_body"], "request_id": "resp_chosen"}})
    assert "resp_chosen" not in (first.id, second.id) and first.id != second.id
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve("resp_chosen")
    assert sdk.responses.retrieve(first.id).created_at == first.created_at  # not overwritten by the second


def test_stream_has_contiguous_sequence_numbers_and_its_final_object_is_stored(sdk, vllm_engine):
    events = list(sdk.responses.create(**greedy(vllm_engine, 24), stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    # Cut by max_output_tokens: OpenAI's terminal event for it (vLLM's own says response.completed).
    assert events[0].type == "response.created" and events[-1].type == "response.incomplete"
    final = events[-1].response
    assert final.status == "incomplete" and final.incomplete_details.reason == "max_output_tokens"
    assert [(item.type, item.status) for item in final.output] == [("message", "incomplete")]  # the cut message
    # The stream closes that item as the final response lists it (vLLM's done event says "completed").
    assert [e.item for e in events if e.type == "response.output_item.done"] == final.output
    assert delta_text(events) == final.output_text and final.usage.output_tokens == 24
    assert sdk.responses.retrieve(final.id).model_dump() == final.model_dump()
    plain = sdk.responses.create(**greedy(vllm_engine, 24))
    assert plain.output_text == final.output_text


def test_another_key_sees_none_of_it(sdk, other_sdk, vllm_engine):
    mine = sdk.responses.create(**greedy(vllm_engine, 4))
    running = sdk.responses.create(**greedy(vllm_engine, 16), background=True)
    with pytest.raises(openai.NotFoundError):
        other_sdk.responses.retrieve(mine.id)
    with pytest.raises(openai.NotFoundError):
        other_sdk.responses.cancel(running.id)
    with pytest.raises(openai.NotFoundError):
        list(other_sdk.responses.retrieve(running.id, stream=True))
    with pytest.raises(openai.NotFoundError) as refused:
        other_sdk.responses.create(**greedy(vllm_engine, 4), previous_response_id=mine.id)
    assert refused.value.body["param"] == "previous_response_id"
    assert until_final(sdk, running.id).status == "incomplete"  # still the owner's


def test_follow_up_with_previous_response_id_continues_the_conversation(sdk, vllm_engine):
    first = sdk.responses.create(model=vllm_engine.model, input="My name is Ada.", max_output_tokens=8,
                                 temperature=0)
    follow = sdk.responses.create(model=vllm_engine.model, input="What is my name?", max_output_tokens=8,
                                  temperature=0, previous_response_id=first.id)
    assert follow.previous_response_id == first.id
    # The engine given the whole conversation itself: the same prompt, so the same tokens and answer.
    direct = engine_post(vllm_engine, "/v1/responses", {
        "model": vllm_engine.model, "max_output_tokens": 8, "temperature": 0, "store": False,
        "input": [{"role": "user", "content": "My name is Ada."},
                  {"role": "assistant", "content": first.output_text},
                  {"role": "user", "content": "What is my name?"}]}).json()
    assert follow.usage.input_tokens == direct["usage"]["input_tokens"] > first.usage.input_tokens
    assert follow.output_text == direct["output"][0]["content"][0]["text"]


def test_background_answers_queued_then_completes(sdk, vllm_engine):
    queued = sdk.responses.create(**greedy(vllm_engine, 64), background=True)
    assert queued.status == "queued" and queued.background is True and queued.output == []
    final = until_final(sdk, queued.id)
    assert final.status == "incomplete" and final.background is True and final.usage.output_tokens == 64
    assert final.output_text == sdk.responses.create(**greedy(vllm_engine, 64)).output_text


def test_background_stream_dropped_and_resumed_gives_exactly_the_uninterrupted_events(sdk, vllm_engine):
    cut = random.Random(20261201).randint(5, 60)
    stream = sdk.responses.create(**greedy(vllm_engine, 80), background=True, stream=True)
    first = []
    for event in stream:
        first.append(event)
        if len(first) == cut:
            break
    stream.close()  # the connection drops; the run goes on
    response_id = first[0].response.id
    rest = list(sdk.responses.retrieve(response_id, stream=True, starting_after=first[-1].sequence_number))
    whole = first + rest
    assert [e.sequence_number for e in whole] == list(range(len(whole)))
    assert whole[-1].type == "response.incomplete"
    replay = list(sdk.responses.retrieve(response_id, stream=True))
    assert [e.model_dump() for e in whole] == [e.model_dump() for e in replay]
    # Another uninterrupted run of the same greedy request: the same text (vLLM may cut it into deltas
    # differently from one run to the next, so the deltas themselves are compared within one run only).
    again = list(sdk.responses.create(**greedy(vllm_engine, 80), background=True, stream=True))
    assert delta_text(whole) == delta_text(again) and len(delta_text(whole)) > 0
    assert whole[-1].response.usage.output_tokens == again[-1].response.usage.output_tokens == 80


def test_cancel_in_flight_aborts_the_engine_and_cancelling_again_changes_nothing(sdk, idle_vllm_engine):
    engine = idle_vllm_engine
    running = sdk.responses.create(**greedy(engine, 8000), background=True)
    wait_for_metric(engine, RUNNING, lambda v: v >= 1)
    cancelled = sdk.responses.cancel(running.id)
    assert cancelled.status == "cancelled"
    engine.wait_until_nothing_runs(timeout=15)  # vLLM aborted the generation
    assert sdk.responses.cancel(running.id).model_dump() == cancelled.model_dump()
    assert sdk.responses.retrieve(running.id).status == "cancelled"
    events = list(sdk.responses.retrieve(running.id, stream=True))
    # (not an OpenAI event type: the SDK keeps its response as a plain dict)
    assert events[-1].type == "response.cancelled" and events[-1].model_dump()["response"]["status"] == "cancelled"
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_starting_after_at_the_end_answers_nothing_and_past_it_a_400(sdk, gateway_url, vllm_engine):
    queued = sdk.responses.create(**greedy(vllm_engine, 6), background=True)
    until_final(sdk, queued.id)
    events = list(sdk.responses.retrieve(queued.id, stream=True))
    last = events[-1].sequence_number
    assert list(sdk.responses.retrieve(queued.id, stream=True, starting_after=last)) == []
    with pytest.raises(openai.BadRequestError) as past:
        list(sdk.responses.retrieve(queued.id, stream=True, starting_after=last + 1))
    assert past.value.body["param"] == "starting_after"
    for bad in ("-5", "x", "99999999999999999999999"):
        answer = httpx.get(f"{gateway_url}/v1/responses/{queued.id}", params={"stream": "true", "starting_after": bad},
                           headers=headers(), timeout=10)
        assert answer.status_code == 400 and answer.json()["error"]["param"] == "starting_after"


def test_only_background_responses_stream_again_or_cancel(sdk, vllm_engine):
    plain = sdk.responses.create(**greedy(vllm_engine, 4))
    with pytest.raises(openai.BadRequestError):
        list(sdk.responses.retrieve(plain.id, stream=True))
    with pytest.raises(openai.BadRequestError):
        sdk.responses.cancel(plain.id)


def test_store_false_is_not_kept_and_background_needs_store(sdk, vllm_engine):
    unstored = sdk.responses.create(**greedy(vllm_engine, 4), store=False)
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(unstored.id)
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.responses.create(**greedy(vllm_engine, 4), store=False, background=True)
    assert refused.value.body["param"] == "background"


def test_delete_forgets_a_response(sdk, vllm_engine):
    reply = sdk.responses.create(**greedy(vllm_engine, 4))
    sdk.responses.delete(reply.id)
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(reply.id)


def test_a_streaming_client_that_leaves_aborts_the_engine(gateway_url, idle_vllm_engine):
    engine = idle_vllm_engine
    body = {"model": engine.model, "input": "Hi", "max_output_tokens": 8000, "temperature": 0, "ignore_eos": True,
            "stream": True}
    with httpx.stream("POST", gateway_url + "/v1/responses", json=body, headers=headers(), timeout=60) as reply:
        lines = reply.iter_lines()
        seen = [line for _, line in zip(range(40), lines, strict=False)]
        assert any(line.startswith("event: response.output_text.delta") for line in seen)
        assert engine.metrics()[RUNNING] >= 1
    engine.wait_until_nothing_runs(timeout=15)


def test_a_key_at_its_cap_can_still_look_at_cancel_and_delete_its_background_runs(idle_vllm_engine, tmp_path):
    """Retrieve, cancel and delete free capacity, so admission never refuses them; following the events is a stream
    and counts."""
    engine = idle_vllm_engine
    settings = surface_settings(engine, tmp_path, max_inflight_per_key=3, flow_control=False)  # (on: they wait)
    with run_uvicorn(create_app(settings)) as url, httpx.Client(base_url=url, headers=headers(), timeout=60) as http:
        sdk = openai.OpenAI(base_url=url + "/v1", api_key=KEY_A, max_retries=0)
        # Each run holds a slot of its key until it ends (its create one more while it is answered).
        first, second = (sdk.responses.create(**greedy(engine, 8000), background=True) for _ in range(2))
        chat = {"model": engine.model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8000,
                "ignore_eos": True, "stream": True}

        @contextlib.contextmanager
        def held_stream():  # a streamed chat completion read up to its first event: one more slot, held
            with http.stream("POST", "/v1/chat/completions", json=chat) as stream:
                lines = stream.iter_lines()  # kept: a dropped iterator would close the response
                assert stream.status_code == 200 and next(lines).startswith(("id:", "data:"))
                yield

        with held_stream():  # the key is at its cap
            with pytest.raises(openai.RateLimitError):
                sdk.responses.create(**greedy(engine, 4))
            with pytest.raises(openai.RateLimitError):
                list(sdk.responses.retrieve(first.id, stream=True))
            looked = sdk.responses.retrieve(first.id)
            with pytest.raises(openai.NotFoundError):  # still owner-checked
                openai.OpenAI(base_url=url + "/v1", api_key=KEY_B, max_retries=0).responses.cancel(first.id)
            cancelled = sdk.responses.cancel(first.id)
            with held_stream():  # at the cap again
                sdk.responses.delete(second.id)  # a running one is cancelled first
                after = sdk.responses.create(**greedy(engine, 4))  # the slots they held are free again
            with pytest.raises(openai.NotFoundError):
                sdk.responses.retrieve(second.id)
    engine.wait_until_nothing_runs(timeout=15)
    assert looked.status in ("queued", "in_progress")
    assert cancelled.status == "cancelled"
    assert after.usage.output_tokens == 4


def test_an_input_past_the_context_is_openais_context_length_exceeded(sdk, vllm_engine):
    """OpenAI's code and param, which clients switch on (vLLM's 400 has no code and names its own
    ``input_tokens``), whether the response was to be streamed, run in the background, or neither."""
    models = httpx.get(vllm_engine.base_url + "/v1/models", headers=vllm_engine.headers, timeout=30).json()
    context = next(card["max_model_len"] for card in models["data"] if card["id"] == vllm_engine.model)
    too_long = "hello world " * context  # several tokens a repeat
    for extra in ({}, {"stream": True}, {"background": True}):
        with pytest.raises(openai.BadRequestError) as raised:
            sdk.responses.create(model=vllm_engine.model, input=too_long, max_output_tokens=16, **extra)
        assert raised.value.code == "context_length_exceeded" and raised.value.param == "input", raised.value.body
        assert raised.value.type == "invalid_request_error" and str(context) in raised.value.message
