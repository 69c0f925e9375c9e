"""A forced tool call (``tool_choice`` naming a function, or ``"required"``) must come with an arguments object.

The client asked for a call of its tool, and vLLM constrains the output to the tool's schema;
a call whose ``arguments`` are not a JSON object all the same (``common.tool_calls``) is the
engine's failure: a non-streamed answer becomes a 502 (``invalid_tool_call``), a stream ends
with the error event and ``[DONE]`` as soon as an argument opens with anything but ``{``, or
when its choice finishes with arguments that are no whole object. A choice cut by
``max_tokens`` (``finish_reason: "length"``) is relayed as it is, as OpenAI relays it. Requests
that do not force a call keep OpenAI's contract: ``arguments`` are the model's text, which
clients validate.
"""

from __future__ import annotations

import orjson

from gateway.protocols.common.tool_calls import StreamedArguments, invalid_call, is_object
from gateway.protocols.openai.dialect import FINISH_FIELD, OpenAIDialect, OpenAITracker
from gateway.relay.sse import event_json, split_events

TOOL_CALLS = b'"tool_calls":['
CUT = "length"


def forces_a_call(payload: dict) -> bool:
    tool_choice = payload.get("tool_choice")
    return bool(payload.get("tools")) and (tool_choice == "required" or isinstance(tool_choice, dict))


async def check_answer(body: bytes) -> bytes:
    """A non-streamed chat answer, unchanged; an invalid forced call raises the 502's failure."""
    if TOOL_CALLS not in body:
        return body
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body
    for choice in _list(data.get("choices")) if isinstance(data, dict) else ():
        if not isinstance(choice, dict) or choice.get("finish_reason") == CUT:
            continue
        for call in _list(_dict(choice.get("message")).get("tool_calls")):
            function = _dict(_dict(call).get("function"))
            if not is_object(function.get("arguments")):
                arguments = function.get("arguments")
                raise invalid_call(function.get("name"), arguments if isinstance(arguments, str) else repr(arguments))
    return body


def _dict(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list:
    return value if isinstance(value, list) else []


class ForcedCallTracker(OpenAITracker):
    """The OpenAI tracker, reading the tool-call deltas of a stream that forces a call."""

    __slots__ = ("_calls",)

    def __init__(self, **options) -> None:
        super().__init__(**options)
        self._calls: dict[tuple[int, int], StreamedArguments] = {}  # (choice, call index) -> its arguments

    def accept(self, block: bytes) -> bytes:
        if TOOL_CALLS in block or (self._calls and FINISH_FIELD in block):
            for event in split_events(block):
                self._read(event)
        return super().accept(block)

    def _read(self, event: bytes) -> None:
        data = event_json(event)
        for choice in _list(data.get("choices")) if isinstance(data, dict) else ():
            number = _dict(choice).get("index", 0)
            if not isinstance(number, int):
                continue
            for call in _list(_dict(choice.get("delta")).get("tool_calls")):
                if not isinstance(call, dict) or not isinstance(call.get("index", 0), int):
                    continue
                function = _dict(call.get("function"))
                key = (number, call.get("index", 0))
                arguments = self._calls.get(key)
                if arguments is None:
                    arguments = self._calls[key] = StreamedArguments(function.get("name"))
                piece = function.get("arguments")
                if isinstance(piece, str) and not arguments.add(piece):
                    raise arguments.failure()  # (the stream ends with the error event: relay.run)
            finish = choice.get("finish_reason")
            if finish:
                for key in [key for key in self._calls if key[0] == number]:
                    arguments = self._calls.pop(key)
                    if finish != CUT and not arguments.complete():
                        raise arguments.failure()


class ForcedCallDialect(OpenAIDialect):
    """The OpenAI dialect whose trackers check forced calls."""

    def tracker(self, *, relay_usage: bool, collect_text: bool, count_events: bool = True,
                finish_reason: bool = False) -> ForcedCallTracker:
        return ForcedCallTracker(relay_usage=relay_usage, collect_text=collect_text, count_events=count_events,
                                 finish_reason=finish_reason)


FORCED_CALL = ForcedCallDialect()
