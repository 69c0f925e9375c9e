"""Tool calls whose arguments are not a JSON object: the engine's output failure, told as one.

A tool's arguments are an object (OpenAI's ``function.arguments`` encodes one, Anthropic's
``tool_use.input`` is one), and vLLM constrains a forced call to its tool's schema. Yet the
engine sometimes produces something else: seen on vLLM 0.32 with Qwen's ``hermes`` parser, a
forced call whose ``arguments`` is ``-621``. Passed on, that is a 400 from vLLM's Messages route
(its pydantic dump of the answer it could not build, as if the request were wrong), a
``tool_use`` block whose input is a number in a Messages stream, and on OpenAI's routes a call
no client can decode. The gateway answers it as what it is, the upstream's failure: a 502 in
the protocol's envelope, or the protocol's error event in a stream, with a message naming the
tool (code ``invalid_tool_call``). A call cut by the output limit is not this: it ends with
``length``/``max_tokens`` and is relayed as it is, as OpenAI and Anthropic do.
"""

from __future__ import annotations

import orjson

from gateway.failures import InvalidOutput

CODE = "invalid_tool_call"
PREVIEW = 80  # characters of the arguments quoted in the message
_SPACE = " \t\r\n"


def invalid_call(name: object, arguments: str) -> InvalidOutput:
    """The failure that answers a call of tool ``name`` (None: not known) whose ``arguments`` are not a JSON object."""
    preview = arguments if len(arguments) <= PREVIEW else arguments[:PREVIEW] + "..."
    tool = f"tool '{name}'" if name is not None else "a tool"
    return InvalidOutput(f"the model's call of {tool} has arguments that are not a JSON object "
                          f"({preview!r}): the inference engine produced an invalid tool call; "
                          "retrying may give a valid one", code=CODE)


def is_object(arguments: object) -> bool:
    """Whether ``arguments`` (a JSON text) decode to an object."""
    if not isinstance(arguments, str):
        return False
    try:
        return isinstance(orjson.loads(arguments), dict)
    except orjson.JSONDecodeError:
        return False


class StreamedArguments:
    """The arguments of one streamed call, as their pieces arrive."""

    __slots__ = ("name", "pieces", "opened")

    def __init__(self, name: object) -> None:
        self.name = name
        self.pieces: list[str] = []
        self.opened = False  # its first character that is not white space was seen (and was "{")

    def add(self, piece: str) -> bool:
        """Take one piece; False as soon as the arguments cannot be an object (they do not open with "{")."""
        self.pieces.append(piece)
        if not self.opened:
            start = piece.lstrip(_SPACE)
            if start:
                if start[0] != "{":
                    return False
                self.opened = True
        return True

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    def complete(self) -> bool:
        """Whether the arguments, once all arrived, are an object (none at all: the empty object)."""
        text = self.text
        return not text.strip(_SPACE) or is_object(text)

    def failure(self) -> InvalidOutput:
        return invalid_call(self.name, self.text)
