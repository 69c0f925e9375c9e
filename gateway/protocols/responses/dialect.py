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

An item's ``response.output_item.done`` says its final status, as the final response does: vLLM
closes every item ``completed``, and only its terminal event, after it, says the response was
cut. So the tracker holds the last ``response.output_item.done`` until the next event (in the
same engine read, as a rule: no delay a client sees), and sends it then, with the status the
item has in the final response when that event ends it (``incomplete`` for the cut item; for
the gateway's own endings, which follow it the same way, ``incomplete`` too: the response did
not complete after it). Those endings' response objects list the items the stream closed (vLLM's
response objects before the end list none). A stream going on on another engine drops a held
event (``rewind``): the replay closes the item itself.

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
ITEM_DONE = "response.output_item.done"
_ITEM_DONE_MARK = ITEM_DONE.encode()
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
    # The last ``response.output_item.done`` (its event and data), not relayed until the next event
    # says whether the response went on or ended, and how (:meth:`release_held`).
    held: tuple[bytes, dict] | None = None
    items: dict = field(default_factory=dict)   # output index -> the item as its done event closed it

    def base(self) -> dict:
        """The response as known so far: what the endings the gateway writes start from (with the
        items the stream closed, when its last response object has fewer: vLLM's before the end have none)."""
        if self.response is not None:
            known = dict(self.response)
        else:
            known = {"id": self.response_id, "object": "response", "output": [], "usage": None, **self.patch}
        output = known.get("output")
        if self.items and (not isinstance(output, list) or len(output) < len(self.items)):
            known["output"] = [self.items[index] for index in sorted(self.items, key=_index_order)]
        return known

    def ended_object(self, status: str, **fields: object) -> dict:
        return {**self.base(), "status": status, **fields}

    def release_held(self) -> list[bytes]:
        """The held ``response.output_item.done``, as it must go out now: with the status its item has
        in the final response once the response ended (``incomplete`` when the response ended other than
        ``completed`` without listing it: the gateway's endings), as the engine wrote it while it goes on."""
        if self.held is None:
            return []
        event_bytes, data = self.held
        self.held = None
        item = data.get("item")
        if not isinstance(item, dict):
            return [event_bytes]
        status = _final_status(self.final, item) if self.final is not None else None
        if status is not None and status != item.get("status"):
            item["status"] = status
            head = b"event: " + ITEM_DONE.encode() + b"\n" if event_bytes.startswith(b"event:") else b""
            event_bytes = head + b"data: " + orjson.dumps(data)
        self.items[data.get("output_index")] = item
        return [event_bytes]

    def rewind(self, delivered: int) -> None:
        """The stream goes on on another engine after the ``delivered`` events clients have: a held event
        was never delivered (the replay sends its own), and the numbering goes on from there."""
        self.held = None
        self.next_sequence = delivered


def _index_order(index: object) -> tuple[int, int]:
    return (0, index) if isinstance(index, int) else (1, 0)


def _final_status(final: dict, item: dict) -> str | None:
    """The status ``item`` has in the ``final`` response object (matched by id); for an item it does
    not list, ``incomplete`` when the response did not complete (it was cut after the item's end)."""
    output = final.get("output")
    for listed in output if isinstance(output, list) else ():
        if isinstance(listed, dict) and listed.get("id") == item.get("id") and listed.get("type") == item.get("type"):
            status = listed.get("status")
            return status if isinstance(status, str) else None
    return None if final.get("status") == "completed" else "incomplete"


def event(name: str, payload: dict) -> bytes:
    """One event, without its blank line."""
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(payload)


def failed_events(run: ResponsesRun, message: str, code: str) -> list[bytes]:
    n = run.next_sequence
    error = {"code": code, "message": message}
    run.final = run.ended_object("failed", error=error)  # (what the response's record takes too)
    held = run.release_held()
    if held:
        run.final = run.ended_object("failed", error=error)  # (with the item it closed)
    return [*held, event("error", {"type": "error", **error, "param": None, "sequence_number": n}),
            event("response.failed", {"type": "response.failed", "sequence_number": n + 1, "response": run.final})]


def mark_cut_item(response: dict) -> bool:
    """Give the item a response cut by ``max_output_tokens`` was generating the status ``incomplete``.

    OpenAI says so of the cut item (its last output item) as of the response; vLLM's item says
    ``completed``. True if it changed. (The stream's own ``response.output_item.done`` of that item
    waits for the terminal event and takes the status from it: :meth:`ResponsesRun.release_held`.)
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

def _item_done(item: bytes) -> dict | None:
    """The data of a ``response.output_item.done`` event (else None: a delta may hold the words)."""
    data = event_json(item)
    return data if data is not None and data.get("type") == ITEM_DONE else None


class ResponsesTracker:
    __slots__ = ("ended", "run", "_result")

    def __init__(self, run: ResponsesRun) -> None:
        self.ended = False
        self.run = run
        self._result = StreamResult()

    def accept(self, block: bytes) -> bytes:
        run = self.run
        if LIFECYCLE_MARK not in block and ERROR_LINE not in block and _ITEM_DONE_MARK not in block \
                and run.held is None:
            run.next_sequence += block.count(SEPARATOR)
            self._result.content_events += block.count(b".delta\n")
            return block
        kept: list[bytes] = []
        changed = run.held is not None
        for item in split_events(block):
            if LIFECYCLE_MARK in item:
                rewritten = self._lifecycle(item)  # (a terminal one decides the held item's status)
                changed = changed or rewritten is not item
                kept.extend(run.release_held())
                kept.append(rewritten)
            elif item.startswith(ERROR_LINE):
                kept.extend(self._engine_error(item))
                changed = True
            elif _ITEM_DONE_MARK in item and (done := _item_done(item)) is not None:
                kept.extend(run.release_held())
                run.held = (item, done)  # until the next event tells whether the response goes on
                run.next_sequence += 1
                changed = True
            else:
                kept.extend(run.release_held())
                run.next_sequence += 1
                self._result.content_events += item.count(b".delta\n")
                kept.append(item)
            if self.ended:
                changed = changed or len(kept) != block.count(SEPARATOR)
                break
        if not changed:
            return block
        return SEPARATOR.join(kept) + SEPARATOR if kept else b""

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
        """vLLM's ``error`` event ends its stream: it goes out (after a held item, now ``incomplete``)
        with the ``response.failed`` that says so."""
        run = self.run
        data = event_json(item) or {}
        sequence = data.get("sequence_number")
        run.next_sequence = sequence + 1 if isinstance(sequence, int) else run.next_sequence + 1
        error = {"code": str(data.get("code") or "server_error"), "message": str(data.get("message"))}
        self._result.error = error["message"]
        run.final = run.ended_object("failed", error=error)
        held = run.release_held()
        if held:
            run.final = run.ended_object("failed", error=error)  # (with the item it closed)
        self.ended = True
        failed = event("response.failed", {"type": "response.failed", "sequence_number": run.next_sequence,
                                           "response": run.final})
        run.next_sequence += 1
        return [*held, item, failed]

    def rewind(self, delivered: int) -> None:
        """The stream goes on on another engine after the ``delivered`` events clients have (``relay.switch``)."""
        self.run.rewind(delivered)

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
        held = run.release_held()
        if held:
            run.final = run.ended_object("cancelled")  # (with the item it closed)
        return [*held, event("response.cancelled", {"type": "response.cancelled",
                                                    "sequence_number": run.next_sequence, "response": run.final})]


def ending_dialect(response_id: str, index: int) -> ResponsesDialect:
    """The dialect for endings of a stored run written at event ``index`` (sessions.persistence)."""
    return ResponsesDialect(ResponsesRun(response_id, next_sequence=index))
