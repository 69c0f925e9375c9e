"""Going on from exactly what clients received (after a replay diverged): the request it builds and its filter."""

from __future__ import annotations

import orjson

from gateway.protocols.openai.delivered import Delivered
from gateway.protocols.openai.extend import ContinueDelivered, ExtendPlan

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tell me a story."}]


def delivered(*deltas: dict, head: tuple = ("chatcmpl-1", 100)) -> Delivered:
    frames = [b"id: s:%d\ndata: " % i + orjson.dumps({"id": head[0], "created": head[1], "choices": [
        {"index": 0, "delta": delta, "finish_reason": None}]}) + b"\n\n" for i, delta in enumerate(deltas)]
    seen = Delivered.read(frames)
    assert seen is not None
    return seen


def payload(**extra) -> dict:
    return {"model": "m", "messages": MESSAGES, "stream": True, "temperature": 0, "max_tokens": 100, **extra}


def test_the_partial_answer_becomes_the_final_assistant_message_continued():
    plan = ExtendPlan.of(payload(), delivered({"role": "assistant", "content": ""}, {"content": "Once"},
                                              {"content": " upon"}))
    assert plan is not None
    assert plan.payload["messages"] == [*MESSAGES, {"role": "assistant", "content": "Once upon"}]
    assert plan.payload["continue_final_message"] is True and plan.payload["add_generation_prompt"] is False
    original, with_partial = plan.tokenize
    assert original == {"model": "m", "messages": MESSAGES, "add_generation_prompt": True,
                        "continue_final_message": False}
    assert with_partial == {"model": "m", "messages": plan.payload["messages"], "add_generation_prompt": False,
                            "continue_final_message": True}


def test_a_client_continuing_its_own_assistant_message_gets_the_partial_answer_appended_to_it():
    own = [*MESSAGES, {"role": "assistant", "content": "Once"}]
    plan = ExtendPlan.of(payload(messages=own, continue_final_message=True, add_generation_prompt=False),
                         delivered({"content": " upon"}, {"content": " a time"}))
    assert plan is not None and plan.payload["messages"] == [*MESSAGES, {"role": "assistant",
                                                                         "content": "Once upon a time"}]
    assert plan.tokenize[0]["continue_final_message"] is True and plan.tokenize[0]["add_generation_prompt"] is False


def test_the_budget_loses_what_the_partial_answer_took_and_keeps_at_least_one_token():
    plan = ExtendPlan.of(payload(max_completion_tokens=50, min_tokens=30), delivered({"content": "Once"}))
    plan.spend(20)
    assert (plan.payload["max_tokens"], plan.payload["max_completion_tokens"], plan.payload["min_tokens"]) == (
        80, 30, 10)
    plan.spend(200)
    assert (plan.payload["max_tokens"], plan.payload["max_completion_tokens"], plan.payload["min_tokens"]) == (1, 1, 0)


def test_what_cannot_go_on_from_a_partial_answer():
    text = delivered({"content": "Once"})
    assert ExtendPlan.of(payload(), delivered({"reasoning_content": "hmm"}, {"content": "Once"})) is None
    assert ExtendPlan.of(payload(response_format={"type": "json_schema", "json_schema": {}}), text) is None
    assert ExtendPlan.of(payload(structured_outputs={"regex": "a+"}), text) is None
    assert ExtendPlan.of(payload(echo=True), text) is None
    finished = Delivered.read([b"data: " + orjson.dumps({"id": "c", "created": 1, "choices": [
        {"index": 0, "delta": {"content": "Once"}, "finish_reason": "length"}]}) + b"\n\n"])
    assert ExtendPlan.of(payload(), finished) is None  # a complete answer gets nothing appended
    assert ExtendPlan.of(payload(messages=MESSAGES, continue_final_message=True), text) is None  # last is no assistant
    assert ExtendPlan.of(payload(response_format={"type": "text"}), text) is not None


def test_text_shaped_like_template_tokens_is_never_re_rendered_even_as_look_alikes():
    for partial in ("ok <|im_end|>", "<|endoftext|>", "<think>", "</tool_call>", "＜｜im_start｜＞system"):
        assert ExtendPlan.of(payload(), delivered({"content": partial})) is None, partial
    assert ExtendPlan.of(payload(), delivered({"content": "a < b and c | d > e"})) is not None


def test_the_filter_restyles_chunks_drops_the_second_role_and_counts_the_partial_answer_as_completion():
    seen = delivered({"role": "assistant", "content": ""}, {"content": "Once"})
    keep = ContinueDelivered(seen, prompt_tokens=20, spent=3)
    block = b"".join(b"data: " + orjson.dumps(chunk) + b"\n\n" for chunk in [
        {"id": "chatcmpl-2", "created": 200, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                           "finish_reason": None}]},
        {"id": "chatcmpl-2", "created": 200, "choices": [{"index": 0, "delta": {"content": " upon"},
                                                           "finish_reason": None}]},
        {"id": "chatcmpl-2", "created": 200, "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]},
        {"id": "chatcmpl-2", "created": 200, "choices": [],
         "usage": {"prompt_tokens": 23, "completion_tokens": 7, "total_tokens": 30}},
    ]) + b"data: [DONE]\n\n"
    events = [event for event in keep(block).split(b"\n\n") if event]
    assert events[-1] == b"data: [DONE]"
    chunks = [orjson.loads(event[6:]) for event in events[:-1]]
    assert [(chunk["id"], chunk["created"]) for chunk in chunks] == [("chatcmpl-1", 100)] * 3
    assert [chunk["choices"][0]["delta"] for chunk in chunks[:2]] == [{"content": " upon"}, {}]
    assert chunks[2]["usage"] == {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30}


def test_content_events_are_counted_for_the_budget():
    seen = delivered({"role": "assistant", "content": ""}, {"content": "Once"}, {"content": ""}, {"content": " up"})
    assert seen.content_events == 2 and seen.text == {"content": "Once up"}
