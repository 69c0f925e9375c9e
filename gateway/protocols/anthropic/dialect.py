"""The Anthropic streaming dialect: ``event: <name>`` + ``data:`` events, ending with ``message_stop``.

vLLM converts its chat stream into Anthropic's events: ``message_start`` (input tokens),
``content_block_start``/``delta``/``stop``, ``message_delta`` (stop reason, input and output
tokens), ``message_stop``; no ``ping`` (the gateway's keep-alive comments cover silences) and
no ``[DONE]``. They are relayed as they are: a read of content deltas costs two byte
searches. Only the message events are decoded (usage per key), and an ``error`` event gets
Anthropic's type name (vLLM writes ``internal_error``; Anthropic's is ``api_error``).

A request with tools gets a tracker that also reads its ``tool_use`` blocks
(``common.tool_calls``): input that cannot be an object (its first character is not ``{``)
ends the stream at once with an ``error`` event instead of the rest of a malformed block;
input that is not a whole object when its block stops does too, unless the message then
stops at ``max_tokens`` (a call cut by the limit, relayed as Anthropic relays it). Streams
without tools keep the byte-search path; with tools (every Claude Code request) a read of text
deltas costs one more byte search (measured in process: 0.9 -> 1.6 us a read, on a loaded
2-core machine) and a tool-input delta is decoded (3.6 us).
"""

from __future__ import annotations

import orjson

from gateway.protocols.anthropic.errors import error_event_data
from gateway.protocols.common.tool_calls import StreamedArguments
from gateway.relay.dialect import StreamResult
from gateway.relay.sse import SEPARATOR, event_json, split_events

MESSAGE_EVENT = b"event: message_"
ERROR_EVENT = b"event: error\n"
DELTA_EVENT = b"event: content_block_delta\n"
STOP_EVENT = b"event: message_stop\n"
BLOCK_START = b"event: content_block_start\n"
CANCELLED_STOP_REASON = "cancelled"  # not one of Anthropic's: clients can tell it from end_turn and max_tokens


def _event(name: str, payload: dict) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(payload)


def openai_usage(usage: dict) -> dict:
    """Anthropic's usage in the OpenAI shape the relay counts (``tenancy.usage.counts``): the
    prompt is all input tokens, the cached ones among them apart. Anthropic's ``input_tokens``
    leaves out what was read from or written to the prompt cache (vLLM reports it so too), so
    reading ``input_tokens`` alone under-counts the prompt of every cached request."""
    read = _count(usage.get("cache_read_input_tokens"))
    prompt = _count(usage.get("input_tokens")) + read + _count(usage.get("cache_creation_input_tokens"))
    counted = {"prompt_tokens": prompt, "completion_tokens": _count(usage.get("output_tokens"))}
    if read:
        counted["prompt_tokens_details"] = {"cached_tokens": read}
    return counted


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


class AnthropicTracker:
    __slots__ = ("ended", "_collect_text", "_result", "_parts", "_start_usage", "_tools", "_unfinished")

    def __init__(self, *, collect_text: bool, check_tools: bool = False) -> None:
        self.ended = False
        self._collect_text = collect_text
        self._result = StreamResult()
        self._parts: list[str] = []
        self._start_usage: dict = {}  # message_start's usage: the input tokens, cached ones apart
        # The open tool_use blocks' input by block index (None: no tools in the request, nothing read).
        self._tools: dict[int, StreamedArguments] | None = {} if check_tools else None
        self._unfinished: StreamedArguments | None = None  # a stopped block whose input is no whole object

    def accept(self, block: bytes) -> bytes:
        if not self._collect_text and MESSAGE_EVENT not in block and ERROR_EVENT not in block \
                and not (self._tools is not None and (self._tools or BLOCK_START in block)):
            self._result.content_events += block.count(DELTA_EVENT)
            return block
        kept: list[bytes] = []
        changed = False
        for event in split_events(block):
            if event.startswith(b"event: content_block_delta"):
                self._result.content_events += 1
                if self._collect_text:
                    self._read_text(event)
                if self._tools:
                    self._read_tool_input(event)
            elif event.startswith(b"event: content_block_st"):
                if self._tools is not None:
                    self._read_block(event)
            elif event.startswith(b"event: message_"):
                self._read_message_event(event)
            elif event.startswith(b"event: error"):
                event, rewritten = self._error(event)
                changed = changed or rewritten
                self.ended = True
            kept.append(event)
            if self.ended:
                changed = changed or len(kept) < block.count(SEPARATOR)
                break
        return SEPARATOR.join(kept) + SEPARATOR if changed else block

    def _read_block(self, event: bytes) -> None:
        """A block's start (a tool_use block's input is read from then on) or stop (its input must be whole)."""
        data = event_json(event) or {}
        index = data.get("index")
        if data.get("type") == "content_block_start":
            block = data.get("content_block")
            if isinstance(block, dict) and block.get("type") == "tool_use" and isinstance(index, int):
                self._tools[index] = StreamedArguments(block.get("name"))
        elif data.get("type") == "content_block_stop" and isinstance(index, int) and index in self._tools:
            arguments = self._tools.pop(index)
            if not arguments.complete():  # a failure unless the message stops at max_tokens (a cut call)
                self._unfinished = arguments

    def _read_tool_input(self, event: bytes) -> None:
        data = event_json(event) or {}
        index = data.get("index")
        arguments = self._tools.get(index) if isinstance(index, int) else None
        delta = data.get("delta")
        if arguments is not None and isinstance(delta, dict) and delta.get("type") == "input_json_delta":
            if not arguments.add(str(delta.get("partial_json") or "")):
                raise arguments.failure()  # (the stream ends with the error event: relay.run)

    def _read_message_event(self, event: bytes) -> None:
        data = event_json(event) or {}
        kind = data.get("type")
        if kind == "message_start":
            usage = (data.get("message") or {}).get("usage")
            self._start_usage = usage if isinstance(usage, dict) else {}
        elif kind == "message_delta":
            usage = data.get("usage")
            usage = {key: value for key, value in usage.items() if value} if isinstance(usage, dict) else {}
            self._result.usage = openai_usage(self._start_usage | usage)
            self._result.finish_reason = (data.get("delta") or {}).get("stop_reason")
            if self._unfinished is not None and self._result.finish_reason != "max_tokens":
                raise self._unfinished.failure()
        elif kind == "message_stop":
            self.ended = True

    def _error(self, event: bytes) -> tuple[bytes, bool]:
        data = event_json(event) or {}
        error = data.get("error") if isinstance(data.get("error"), dict) else {}
        self._result.error = str(error.get("message"))
        if error.get("type") == "internal_error":
            return b"event: error\ndata: " + error_event_data(self._result.error), True
        return event, False

    def _read_text(self, event: bytes) -> None:
        delta = (event_json(event) or {}).get("delta") or {}
        if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str):
            self._parts.append(delta["text"])

    def result(self) -> StreamResult:
        if self._parts:
            self._result.text = "".join(self._parts)
        if self._result.usage is None and self._start_usage:  # cut before message_delta
            estimated = self._result.estimated_usage() or {"completion_tokens": 0}
            self._result.usage = openai_usage(self._start_usage | {"output_tokens": estimated["completion_tokens"]})
        return self._result


class AnthropicDialect:
    name = "anthropic"

    def __init__(self, *, check_tools: bool = False) -> None:
        self.check_tools = check_tools  # the request has tools: read its tool_use blocks' input

    def tracker(self, *, relay_usage: bool, collect_text: bool, count_events: bool = True,
                finish_reason: bool = False) -> AnthropicTracker:  # (its ending events carry it: read always)
        return AnthropicTracker(collect_text=collect_text, check_tools=self.check_tools)

    def error_events(self, message: str, code: str) -> list[bytes]:
        kind = "rate_limit_error" if code in ("insufficient_quota", "rate_limit_exceeded") else "api_error"
        return [b"event: error\ndata: " + error_event_data(message, kind)]

    def is_last(self, frame: bytes) -> bool:
        return STOP_EVENT in frame or ERROR_EVENT in frame

    def cancelled_events(self, *, first_event: bytes | None, reason: str, run_id: str,
                         model: object, choices: int, usage: dict | None = None) -> list[bytes]:
        """A ``message_delta`` with stop reason "cancelled", then ``message_stop``.

        Its ``usage.output_tokens`` is the tokens generated before the stop, as the gateway
        counted them (``usage``, what the key is charged): a ``message_delta``'s usage is
        cumulative, and clients (the SDKs' accumulated message) take it as the total.

        A stream stopped before its ``message_start`` went out gets one first (a Messages
        stream opens with it; the SDKs read the message from it), with an id made from the run's.
        """
        generated = _count((usage or {}).get("completion_tokens"))
        events = []
        if first_event is None:
            events.append(_event("message_start", {"type": "message_start", "message": {
                "id": f"msg_{run_id}", "type": "message", "role": "assistant", "content": [], "model": model,
                "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 0, "output_tokens": 0}}}))
        events.append(_event("message_delta", {"type": "message_delta",
                                               "delta": {"stop_reason": CANCELLED_STOP_REASON, "stop_sequence": None},
                                               "usage": {"output_tokens": generated}, "cancel_reason": reason}))
        events.append(_event("message_stop", {"type": "message_stop"}))
        return events


ANTHROPIC = AnthropicDialect()
ANTHROPIC_WITH_TOOLS = AnthropicDialect(check_tools=True)
