"""The Responses dialect on vLLM-shaped events: numbering, patching, and the endings the gateway writes."""

from __future__ import annotations

import asyncio

import orjson

from gateway.protocols.responses.dialect import ResponsesDialect, ResponsesRun, ending_dialect
from gateway.relay.sse import event_json, split_events
from gateway.tenancy.usage.counts import TokenCounts, counts_of


def ev(kind: str, sequence: int, **fields) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, "sequence_number": sequence,
                                                                     **fields}) + b"\n\n"


RESPONSE = {"id": "resp_1", "object": "response", "status": "in_progress", "background": False, "output": []}


def stream(final_status: str = "completed") -> list[bytes]:
    return [ev("response.created", 0, response=RESPONSE), ev("response.in_progress", 1, response=RESPONSE),
            ev("response.output_text.delta", 2, delta="a"), ev("response.output_text.delta", 3, delta="b"),
            ev("response.completed", 4, response={**RESPONSE, "status": final_status,
                                                 "usage": {"input_tokens": 7, "output_tokens": 2}})]


async def test_content_reads_pass_untouched_and_the_numbering_is_followed():
    run = ResponsesRun("resp_1")
    tracker = ResponsesDialect(run).tracker(relay_usage=False, collect_text=False)
    events = stream()
    assert tracker.accept(events[0] + events[1]) == events[0] + events[1]  # no patch: nothing rewritten
    deltas = events[2] + events[3]
    assert tracker.accept(deltas) is deltas and run.next_sequence == 4
    assert tracker.accept(events[4]) == events[4] and tracker.ended
    result = tracker.result()
    assert result.usage == {"prompt_tokens": 7, "completion_tokens": 2} and result.finish_reason == "completed"
    assert run.final["status"] == "completed"


async def test_the_gateways_fields_are_patched_into_every_response_object():
    run = ResponsesRun("resp_1", patch={"background": True, "previous_response_id": "resp_0"},
                       created=asyncio.get_running_loop().create_future())
    tracker = ResponsesDialect(run).tracker(relay_usage=False, collect_text=False)
    out = b"".join(tracker.accept(block) for block in stream())
    objects = [event_json(e)["response"] for e in split_events(out) if b'"response":{' in e]
    assert len(objects) == 3 and all(o["background"] is True and o["previous_response_id"] == "resp_0"
                                     for o in objects)
    assert run.created.result()["background"] is True
    assert [event_json(e)["sequence_number"] for e in split_events(out)] == [0, 1, 2, 3, 4]


def test_the_gateways_endings_continue_the_numbering():
    run = ResponsesRun("resp_1")
    dialect = ResponsesDialect(run)
    tracker = dialect.tracker(relay_usage=False, collect_text=False)
    tracker.accept(b"".join(stream()[:3]))
    failed = [event_json(e) for e in dialect.error_events("engine gone", "stream_interrupted")]
    assert [(e["type"], e["sequence_number"]) for e in failed] == [("error", 3), ("response.failed", 4)]
    assert failed[1]["response"]["status"] == "failed" and failed[1]["response"]["id"] == "resp_1"
    assert failed[1]["response"]["error"] == {"code": "stream_interrupted", "message": "engine gone"}
    cancelled = event_json(dialect.cancelled_events(first_event=None, reason="cancel_request", run_id="x",
                                                    model="m", choices=1)[0])
    assert cancelled["type"] == "response.cancelled" and cancelled["sequence_number"] == 3
    assert dialect.is_last(b"id: resp_1:4\n" + dialect.error_events("x", "y")[1] + b"\n\n")
    assert not dialect.is_last(stream()[2])


def test_an_engine_error_event_is_followed_by_response_failed():
    run = ResponsesRun("resp_1")
    tracker = ResponsesDialect(run).tracker(relay_usage=False, collect_text=False)
    tracker.accept(b"".join(stream()[:3]))
    out = split_events(tracker.accept(ev("error", 3, code="server_error", message="boom")))
    assert [event_json(e)["type"] for e in out] == ["error", "response.failed"]
    assert event_json(out[1])["sequence_number"] == 4 and tracker.ended
    assert run.final["error"] == {"code": "server_error", "message": "boom"}


def test_endings_written_for_a_stored_run_start_at_its_index():
    dialect = ending_dialect("resp_9", 17)
    events = [event_json(e) for e in dialect.error_events("producer died", "producer_lost")]
    assert [e["sequence_number"] for e in events] == [17, 18]
    assert events[1]["response"]["id"] == "resp_9"


async def test_a_streamed_response_is_stored_before_its_terminal_event_goes_out():
    """What the runner's loop does with ``before_end``: the terminal event read, stored, then written."""
    from gateway.relay.pump import pump

    run = ResponsesRun("resp_1")
    order: list[str] = []
    blocks = stream()

    class Engine:  # the part of an EngineStream the loop reads
        errors = ()

        def __init__(self) -> None:
            self.left = list(blocks)

        async def readany(self) -> bytes:
            return self.left.pop(0) if self.left else b""

        async def reach_end(self) -> None:
            order.append("end of body")

    class Sink:
        async def write(self, block: bytes) -> None:
            order.extend(event_json(event)["type"] for event in split_events(block))

    async def store() -> None:
        order.append(f"stored {run.final['status']}")

    tracker = ResponsesDialect(run).tracker(relay_usage=False, collect_text=False)
    assert await pump(Engine(), tracker, Sink(), before_end=store) is None
    assert order == ["response.created", "response.in_progress", "response.output_text.delta",
                     "response.output_text.delta", "stored completed", "response.completed", "end of body"]


def test_a_cut_response_ends_with_response_incomplete_as_openai_sends_it():
    """vLLM ends an answer cut by ``max_output_tokens`` with ``response.completed`` (status incomplete)."""
    run = ResponsesRun("resp_1")
    tracker = ResponsesDialect(run).tracker(relay_usage=False, collect_text=False)
    events = stream("incomplete")
    tracker.accept(b"".join(events[:4]))
    out = split_events(tracker.accept(events[4]))
    assert len(out) == 1 and out[0].startswith(b"event: response.incomplete\ndata: ")
    last = event_json(out[0])
    assert last["type"] == "response.incomplete" and last["sequence_number"] == 4
    assert last["response"]["status"] == "incomplete"
    assert last["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert tracker.ended and ResponsesDialect(run).is_last(out[0] + b"\n\n")
    assert tracker.result().usage == {"prompt_tokens": 7, "completion_tokens": 2}
    assert run.final["status"] == "incomplete"


def test_the_item_a_cut_response_was_generating_is_incomplete_too():
    """vLLM's cut message says ``completed``; OpenAI's says ``incomplete``, as the response does."""
    run = ResponsesRun("resp_1")
    tracker = ResponsesDialect(run).tracker(relay_usage=False, collect_text=False)
    done = {"type": "message", "status": "completed", "content": []}
    last = ev("response.completed", 0, response={**RESPONSE, "status": "incomplete",
                                                 "incomplete_details": {"reason": "max_output_tokens"},
                                                 "output": [{"type": "reasoning", "status": "completed"}, done]})
    data = event_json(split_events(tracker.accept(last))[0])
    assert [item["status"] for item in data["response"]["output"]] == ["completed", "incomplete"]
    assert run.final["output"][-1]["status"] == "incomplete"  # (what the response's record keeps)
    # A response that completed, or was cut for another reason, keeps its items as they are.
    for status, details in (("completed", None), ("incomplete", {"reason": "content_filter"})):
        tracker = ResponsesDialect(ResponsesRun("resp_2")).tracker(relay_usage=False, collect_text=False)
        same = ev("response.completed", 0, response={**RESPONSE, "status": status, "incomplete_details": details,
                                                     "output": [done]})
        data = event_json(split_events(tracker.accept(same))[0])
        assert data["response"]["output"] == [done]


def test_the_engines_own_incomplete_reason_is_kept():
    run = ResponsesRun("resp_1")
    tracker = ResponsesDialect(run).tracker(relay_usage=False, collect_text=False)
    last = ev("response.completed", 0, response={**RESPONSE, "status": "incomplete",
                                                 "incomplete_details": {"reason": "content_filter"}})
    data = event_json(split_events(tracker.accept(last))[0])
    assert data["type"] == "response.incomplete" and data["response"]["incomplete_details"] == {
        "reason": "content_filter"}


def test_a_failed_status_ends_with_response_failed_and_a_completed_one_is_untouched():
    run = ResponsesRun("resp_1")
    tracker = ResponsesDialect(run).tracker(relay_usage=False, collect_text=False)
    error = {"code": "server_error", "message": "boom"}
    data = event_json(split_events(tracker.accept(ev("response.completed", 0, response={
        **RESPONSE, "status": "failed", "error": error})))[0])
    assert data["type"] == "response.failed" and data["response"]["error"] == error and tracker.ended
    completed = stream()[4]
    assert ResponsesDialect(ResponsesRun("resp_2")).tracker(relay_usage=False, collect_text=False).accept(
        completed) == completed


def test_cached_input_and_reasoning_output_reach_the_count():
    run = ResponsesRun("resp_1")
    tracker = ResponsesDialect(run).tracker(relay_usage=False, collect_text=False)
    usage = {"input_tokens": 120, "output_tokens": 40, "input_tokens_details": {"cached_tokens": 64},
             "output_tokens_details": {"reasoning_tokens": 25}}
    tracker.accept(ev("response.completed", 0, response={**RESPONSE, "status": "completed", "usage": usage}))
    counted = tracker.result().usage
    assert counted == {"prompt_tokens": 120, "completion_tokens": 40, "prompt_tokens_details": {"cached_tokens": 64},
                       "completion_tokens_details": {"reasoning_tokens": 25}}
    assert counts_of(counted) == TokenCounts(prompt=120, completion=40, cached=64, reasoning=25)


ITEM = {"id": "msg_1", "type": "message", "status": "completed", "content": [{"type": "output_text", "text": "ab"}]}


def item_stream() -> list[bytes]:
    """A message item opened, written and closed (``completed``, as vLLM closes it), then nothing yet."""
    opened = {**ITEM, "status": "in_progress", "content": []}
    return [ev("response.created", 0, response=RESPONSE), ev("response.in_progress", 1, response=RESPONSE),
            ev("response.output_item.added", 2, output_index=0, item=opened),
            ev("response.output_text.delta", 3, output_index=0, delta="ab"),
            ev("response.output_item.done", 4, output_index=0, item=ITEM)]


def test_an_items_done_event_waits_for_the_next_event_and_takes_its_status_in_the_final_response():
    """vLLM closes an item ``completed`` before its terminal event says the response was cut: the done
    event goes out with the next event, with the item's status in the final response (``incomplete``)."""
    run = ResponsesRun("resp_1")
    tracker = ResponsesDialect(run).tracker(relay_usage=False, collect_text=False)
    events = item_stream()
    assert tracker.accept(b"".join(events[:4])) == b"".join(events[:4])
    assert tracker.accept(events[4]) == b"" and run.next_sequence == 5  # held, counted
    cut = ev("response.completed", 5, response={**RESPONSE, "status": "incomplete", "output": [ITEM],
                                                "incomplete_details": {"reason": "max_output_tokens"}})
    out = [event_json(e) for e in split_events(tracker.accept(cut))]
    assert [(e["type"], e["sequence_number"]) for e in out] == [("response.output_item.done", 4),
                                                               ("response.incomplete", 5)]
    assert out[0]["item"]["status"] == "incomplete" and out[1]["response"]["output"] == [out[0]["item"]]
    # A response that goes on, or completes, gets the event as vLLM wrote it.
    for following in (ev("response.output_item.added", 5, output_index=1, item={"id": "msg_2", "type": "message"}),
                      ev("response.completed", 5, response={**RESPONSE, "status": "completed", "output": [ITEM]})):
        tracker = ResponsesDialect(ResponsesRun("resp_2")).tracker(relay_usage=False, collect_text=False)
        tracker.accept(b"".join(events))
        assert split_events(tracker.accept(following))[0] + b"\n\n" == events[4]


def test_the_gateways_endings_close_a_held_item_incomplete_and_list_it():
    for ending in ("error", "cancelled", "engine_error"):
        run = ResponsesRun("resp_1")
        dialect = ResponsesDialect(run)
        tracker = dialect.tracker(relay_usage=False, collect_text=False)
        tracker.accept(b"".join(item_stream()))
        if ending == "error":
            out = dialect.error_events("engine gone", "stream_interrupted")
        elif ending == "cancelled":
            out = dialect.cancelled_events(first_event=None, reason="cancel_request", run_id="x", model="m", choices=1)
        else:
            out = split_events(tracker.accept(ev("error", 5, code="server_error", message="boom")))
        events = [event_json(e) for e in out]
        assert events[0]["type"] == "response.output_item.done" and events[0]["sequence_number"] == 4, ending
        assert [e["sequence_number"] for e in events] == list(range(4, 4 + len(events))), ending
        assert events[0]["item"] == {**ITEM, "status": "incomplete"}, ending
        assert events[-1]["response"]["output"] == [events[0]["item"]] == run.final["output"], ending


def test_a_continuation_drops_the_held_event_and_numbers_on_from_what_clients_have():
    run = ResponsesRun("resp_1")
    tracker = ResponsesDialect(run).tracker(relay_usage=False, collect_text=False)
    tracker.accept(b"".join(item_stream()))
    tracker.rewind(4)  # clients have events 0..3: the replay sends the item's done event itself
    assert run.held is None and run.next_sequence == 4
    failed = [event_json(e) for e in ResponsesDialect(run).error_events("x", "stream_interrupted")]
    assert [e["sequence_number"] for e in failed] == [4, 5]
