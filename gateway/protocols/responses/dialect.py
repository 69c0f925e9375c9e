"""The Responses streaming dialect: ``event: <type>`` + ``data:`` events numbered by ``sequence_number``.

vLLM streams ``response.created`` (0), ``response.in_progress`` (1), output events, and ends
with ``response.completed`` (also when the status is ``incomplete``); a generation error is an
``error`` event and nothing after it. No ``[DONE]``.

OpenAI names the terminal event after the response's status: ``response.completed``,
``response.incomplete`` (``incomplete_details.reason``, e.g. ``max_output_tokens``),
``response.failed`` (``error``). Clients switch on the event, not the status: the Agents SDK
fails a run on ``response.incomplete`` as it fails a non-streamed response whose status is
``incomplete``, and takes ``response.completed`` as success whatever its status. So the
tracker renames vLLM's ``response.completed`` after its status (:data:`TERMINAL_EVENT`), and
gives an incomplete response without ``incomplete_details`` the reason vLLM's non-streamed
answer gives (``max_output_tokens``, the only one it reports), and its cut item the status
``incomplete`` (:func:`mark_cut_item`, which the non-streamed answer gets too).

The numbers are contiguous from 0, one per event, so in a session's log event index N is
``sequence_number`` N: resuming "after N" is resuming after index N.

State lives in a :class:`ResponsesRun`, one per response: the tracker keeps the next
sequence number and the latest response object there (and patches the fields the gateway
owns into every response object: ``background``, ``previous_response_id``), so the endings
the gateway writes itself continue the numbering and carry the response:

- an error: ``error`` then ``response.failed`` (also appended after vLLM's own ``error``);
- a cancel: ``response.cancelled``, a lifecycle event named after the status like the others
  (OpenAI defines no event for it; clients that switch on the type can tell it apart).

Content reads (deltas) cost two byte searches; only the few lifecycle events are decoded.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import orjson

from gateway.relay.dialect import StreamResult
from gateway.relay.sse import SEPARATOR, event_json, split_events

LIFECYCLE_MARK = b'"response":{'   # only lifecycle events carry the response object
ERROR_LINE = b"event: error\n"
CREATED = "response.created"
TERMINAL_TYPES = ("response.completed", "response.failed", "response.incomplete", "response.cancelled")
# The terminal event of each final status (OpenAI's three; ``cancelled`` is the gateway's own).
TERMINAL_EVENT = {"completed": "response.completed", "incomplete": "response.incomplete",
                  "failed": "response.failed", "cancelled": "response.cancelled"}
INCOMPLETE_REASON = "max_output_tokens"  # what vLLM reports for every incomplete response
_TERMINAL_LINES = tuple(b"event: " + name.encode() + b"\n" for name in TERMINAL_TYPES)


@dataclass(slots=True)
class ResponsesRun:
    """One response's stream state, shared by its tracker and the endings the gateway writes."""

    response_id: str
    next_sequence: int = 0
    patch: dict = field(default_factory=dict)   # set in every response object the stream carries
    response: dict | None = None                # the latest response object seen
    final: dict | None = None                   # the response object of the terminal event
    created: asyncio.Future | None = None       # resolved with the first response object

    def base(self) -> dict:
        """The response as known so far: what the endings the gateway writes start from."""
        if self.response is not None:
            return dict(self.response)
        return {"id": self.response_id, "object": "response", "output": [], "usage": None, **self.patch}

    def ended_object(self, status: str, **fields: object) -> dict:
        return {**self.base(), "status": status, **fields}


def event(name: str, payload: dict) -> bytes:
    """One event, without its blank line."""
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(payload)


def failed_events(run: ResponsesRun, message: str, code: str) -> list[bytes]:
    n = run.next_sequence
    error = {"code": code, "message": message}
    run.final = run.ended_object("failed", error=error)  # (what the response's record takes too)
    return [event("error", {"type": "error", **error, "param": None, "sequence_number": n}),
            event("response.failed", {"type": "response.failed", "sequence_number": n + 1, "response": run.final})]


def mark_cut_item(response: dict) -> bool:
    """Give the item a response cut by ``max_output_tokens`` was generating the status ``incomplete``.

    OpenAI says so of the cut item (its last output item) as of the response; vLLM's item says
    ``completed``. True if it changed. (The stream's own ``response.output_item.done`` went out
    before the terminal event told the response was cut: it keeps vLLM's status.)
    """
    details, output = response.get("incomplete_details"), response.get("output")
    if response.get("status") != "incomplete" or not isinstance(details, dict) \
            or details.get("reason") != INCOMPLETE_REASON or not isinstance(output, list) or not output:
        return False
    last = output[-1]
    if not isinstance(last, dict) or last.get("status") != "completed":
        return False
    last["status"] = "incomplete"
    return True


def _name_terminal(data: dict, response: dict) -> bool:
    """Give a terminal event the name of its response's status, as OpenAI does; True if it changed."""
    status = response.get("status")
    if status == "incomplete" and not response.get("incomplete_details"):
        response["incomplete_details"] = {"reason": INCOMPLETE_REASON}
        changed = True
    else:
        changed = False
    changed = mark_cut_item(response) or changed
    name = TERMINAL_EVENT.get(status) if isinstance(status, str) else None
    if name is not None and name != data.get("type"):
        data["type"] = name
        changed = True
    return changed


def lifecycle_response(frame: bytes) -> tuple[str, dict] | None:
    """``(type, response object)`` of a lifecycle event (framed or not), else None."""
    data = event_json(frame)
    if data is None or not isinstance(data.get("response"), dict):
        return None
    return str(data.get("type")), data["response"]



def openai_usage(usage: dict) -> dict:
    """A Responses usage in the OpenAI shape the relay counts (``tenancy.usage.counts``), with its
    cached input and reasoning output tokens (without them the ledger under-reports both)."""
    counted = {"prompt_tokens": _count(usage.get("input_tokens")),
               "completion_tokens": _count(usage.get("output_tokens"))}
    cached = _count(_detail(usage, "input_tokens_details", "cached_tokens"))
    reasoning = _count(_detail(usage, "output_tokens_details", "reasoning_tokens"))
    if cached:
        counted["prompt_tokens_details"] = {"cached_tokens": cached}
    if reasoning:
        counted["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return counted


def _detail(usage: dict, group: str, name: str) -> object:
    details = usage.get(group)
    return details.get(name) if isinstance(details, dict) else None


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0

class ResponsesTracker:
    __slots__ = ("ended", "run", "_result")

    def __init__(self, run: ResponsesRun) -> None:
        self.ended = False
        self.run = run
        self._result = StreamResult()

    def accept(self, block: bytes) -> bytes:
        run = self.run
        if LIFECYCLE_MARK not in block and ERROR_LINE not in block:
            run.next_sequence += block.count(SEPARATOR)
            self._result.content_events += block.count(b".delta\n")
            return block
        kept: list[bytes] = []
        changed = False
        for item in split_events(block):
            if LIFECYCLE_MARK in item:
                rewritten = self._lifecycle(item)
                changed = changed or rewritten is not item
                kept.append(rewritten)
            elif item.startswith(ERROR_LINE):
                kept.append(item)
                kept.extend(self._engine_error(item))
                changed = True
            else:
                run.next_sequence += 1
                self._result.content_events += item.count(b".delta\n")
                kept.append(item)
            if self.ended:
                changed = changed or len(kept) != block.count(SEPARATOR)
                break
        return SEPARATOR.join(kept) + SEPARATOR if changed else block

    def _lifecycle(self, item: bytes) -> bytes:
        run = self.run
        data = event_json(item)
        if data is None:
            run.next_sequence += 1
            return item
        sequence = data.get("sequence_number")
        run.next_sequence = sequence + 1 if isinstance(sequence, int) else run.next_sequence + 1
        response = data.get("response")
        if not isinstance(response, dict):
            return item
        kind = data.get("type")
        renamed = kind in TERMINAL_TYPES and _name_terminal(data, response)
        if run.patch or renamed:
            response.update(run.patch)
            kind = data["type"]
            head = b"event: " + kind.encode() + b"\n" if item.startswith(b"event:") else b""
            item = head + b"data: " + orjson.dumps(data)
        run.response = response
        if kind == CREATED and run.created is not None and not run.created.done():
            run.created.set_result(response)
        if kind in TERMINAL_TYPES:
            self.ended = True
            run.final = response
            self._result.finish_reason = response.get("status")
            usage = response.get("usage")
            if isinstance(usage, dict):
                self._result.usage = openai_usage(usage)
        return item

    def _engine_error(self, item: bytes) -> list[bytes]:
        """vLLM's ``error`` event ends its stream: add the ``response.failed`` that says so."""
        run = self.run
        data = event_json(item) or {}
        sequence = data.get("sequence_number")
        run.next_sequence = sequence + 1 if isinstance(sequence, int) else run.next_sequence + 1
        error = {"code": str(data.get("code") or "server_error"), "message": str(data.get("message"))}
        self._result.error = error["message"]
        run.final = run.ended_object("failed", error=error)
        self.ended = True
        failed = event("response.failed", {"type": "response.failed", "sequence_number": run.next_sequence,
                                           "response": run.final})
        run.next_sequence += 1
        return [failed]

    def result(self) -> StreamResult:
        return self._result


class ResponsesDialect:
    """The dialect of one response's stream (its run holds the numbering)."""

    name = "responses"

    def __init__(self, run: ResponsesRun) -> None:
        self.run = run

    def tracker(self, *, relay_usage: bool, collect_text: bool, count_events: bool = True,
                finish_reason: bool = False) -> ResponsesTracker:  # (its ending events carry it: read always)
        return ResponsesTracker(self.run)

    def error_events(self, message: str, code: str) -> list[bytes]:
        return failed_events(self.run, message, code)

    def is_last(self, frame: bytes) -> bool:
        return any(line in frame for line in _TERMINAL_LINES)

    def cancelled_events(self, *, first_event: bytes | None, reason: str, run_id: str,
                         model: object, choices: int, usage: dict | None = None) -> list[bytes]:
        run = self.run
        run.final = run.ended_object("cancelled")  # (what the response's record takes too)
        return [event("response.cancelled", {"type": "response.cancelled", "sequence_number": run.next_sequence,
                                             "response": run.final})]


def ending_dialect(response_id: str, index: int) -> ResponsesDialect:
    """The dialect for endings of a stored run written at event ``index`` (sessions.persistence)."""
    return ResponsesDialect(ResponsesRun(response_id, next_sequence=index))
