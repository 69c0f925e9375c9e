"""Continuing a Messages stream on another engine: replay the request there, skip what clients have.

The same choice as for OpenAI chats (``openai.continuation``): the new engine gets the
original request again and the gateway drops the part of its stream clients already
received, checking that it is the same. What clients have is read from the session's log:
the ``message_start`` (the message's id and input tokens: the replay's own are dropped, so
the message keeps its first id), each content block's text, which blocks were closed, and
whether the ``message_delta`` went out. The replay's events then read as the stream's own:
its deltas trimmed to what is new, the block starts and stops clients have dropped.

Only reproducible requests are continued: greedy (``temperature: 0``, or ``top_k: 1``; the
Messages API has no seed, and vLLM's Messages route passes none), no tools, no extended
thinking (its signature differs from one run to the next); and only streams of text blocks.
vLLM's Messages route cannot go on from a partial answer (it has no
``continue_final_message``): when a replay produces other text than clients have, the stream
ends with its ``error`` event, never a spliced answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from gateway.engines.client import EngineClient
from gateway.engines.routing import RouteHints
from gateway.http.context import RequestContext
from gateway.protocols.common.sampling import number
from gateway.relay.continuation import ContinuationDiverged, Replay
from gateway.relay.sse import SEPARATOR, event_json, split_events

COMPARED_DELTAS = {"text_delta": "text", "thinking_delta": "thinking"}


def reproducible(payload: dict) -> bool:
    """Whether running ``payload`` again yields the same stream (greedy, plain text)."""
    if payload.get("tools") or payload.get("tool_choice"):
        return False
    thinking = payload.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") not in (None, "disabled"):
        return False
    temperature, top_k = payload.get("temperature"), payload.get("top_k")
    if number(top_k) and top_k == 1:
        return True
    return number(temperature) and temperature == 0  # (Messages has no seed)


@dataclass(slots=True)
class Block:
    kind: str                      # text | thinking
    text: str = ""
    stopped: bool = False


@dataclass(slots=True)
class DeliveredMessage:
    """What clients already have of a Messages stream."""

    started: bool = False          # its message_start went out
    blocks: list[Block] = field(default_factory=list)
    delta_sent: bool = False       # its message_delta (stop reason, usage) went out

    @classmethod
    def read(cls, frames: list[bytes]) -> DeliveredMessage | None:
        """None when the stream cannot be continued (it ended, failed, or holds more than text)."""
        seen = cls()
        parts: list[list[str]] = []
        for frame in frames:
            data = event_json(frame)
            if data is None:
                continue
            kind = data.get("type")
            if kind == "message_start":
                seen.started = True
            elif kind == "content_block_start":
                block = data.get("content_block") or {}
                if block.get("type") not in ("text", "thinking") or data.get("index") != len(seen.blocks):
                    return None
                seen.blocks.append(Block(block["type"]))
                parts.append([])
            elif kind == "content_block_delta":
                index, delta = data.get("index"), data.get("delta") or {}
                name = COMPARED_DELTAS.get(delta.get("type"))
                if name is None or not isinstance(index, int) or not 0 <= index < len(seen.blocks):
                    return None
                parts[index].append(str(delta.get(name) or ""))
            elif kind == "content_block_stop":
                index = data.get("index")
                if not isinstance(index, int) or not 0 <= index < len(seen.blocks):
                    return None
                seen.blocks[index].stopped = True
            elif kind == "message_delta":
                seen.delta_sent = True
            elif kind in ("message_stop", "error"):
                return None
        for block, pieces in zip(seen.blocks, parts, strict=True):
            block.text = "".join(pieces)
        return seen


class MessagesReplay:
    """The continuation of one Messages stream (``relay.continuation.Continuation``)."""

    __slots__ = ("path", "body")

    def __init__(self, path: str, body: bytes) -> None:
        self.path = path
        self.body = body

    def replay(self, delivered: list[bytes]) -> Replay | None:
        seen = DeliveredMessage.read(delivered)
        if seen is None:
            return None
        return Replay(self.path, self.body, SkipDelivered(seen))

    async def extend(self, delivered: list[bytes], *, engines: EngineClient, route: RouteHints,
                     request: RequestContext) -> Replay | None:
        return None  # vLLM's Messages route cannot continue a partial answer (see the module's docstring)


def continuation_for(payload: dict, *, path: str, body: bytes) -> MessagesReplay | None:
    return MessagesReplay(path, body) if reproducible(payload) else None


class SkipDelivered:
    """The replay filter: drop what clients have (checking it is the same), pass the rest as the stream's own."""

    __slots__ = ("seen", "position")

    def __init__(self, seen: DeliveredMessage) -> None:
        self.seen = seen
        self.position = [0] * len(seen.blocks)

    def _pending(self, upto: int | None = None) -> bool:
        blocks = self.seen.blocks if upto is None else self.seen.blocks[:upto]
        return any(self.position[index] < len(block.text) for index, block in enumerate(blocks))

    def __call__(self, block: bytes) -> bytes:
        kept = [event for event in map(self._event, split_events(block)) if event is not None]
        return SEPARATOR.join(kept) + SEPARATOR if kept else b""

    def _event(self, event: bytes) -> bytes | None:
        data = event_json(event)
        if data is None:
            return event
        kind, seen = data.get("type"), self.seen
        if kind == "message_start":
            return None if seen.started else event
        if kind in ("content_block_start", "content_block_delta", "content_block_stop"):
            return self._block_event(event, data, kind)
        if kind == "message_delta":
            if self._pending():
                raise ContinuationDiverged("the new engine finished before reaching what was already sent")
            return None if seen.delta_sent else event
        return event  # message_stop, ping, the new engine's own error (it ends the stream)

    def _block_event(self, event: bytes, data: dict, kind: str) -> bytes | None:
        index, blocks = data.get("index"), self.seen.blocks
        if not isinstance(index, int):
            raise ContinuationDiverged(f"the new engine's {kind} has no block index")
        if index >= len(blocks):  # a block clients have not seen yet
            if self._pending():
                raise ContinuationDiverged("the new engine started another block before reaching what was sent")
            return event
        if self._pending(upto=index):
            raise ContinuationDiverged(f"the new engine went on to block {index} before reaching what was sent")
        block = blocks[index]
        if kind == "content_block_start":
            if (data.get("content_block") or {}).get("type") != block.kind:
                raise ContinuationDiverged(f"the new engine's block {index} is of another type")
            return None
        if kind == "content_block_stop":
            if self.position[index] < len(block.text):
                raise ContinuationDiverged(f"the new engine's block {index} is shorter than what was sent")
            return None if block.stopped else event
        delta = data.get("delta") or {}
        name = COMPARED_DELTAS.get(delta.get("type"))
        if name is None:
            raise ContinuationDiverged(f"the new engine's answer has a {delta.get('type')}, which is not compared")
        piece = str(delta.get(name) or "")
        at = self.position[index]
        overlap = block.text[at:at + len(piece)]
        if not piece.startswith(overlap):
            raise ContinuationDiverged(f"the new engine generated other text at character {at} of block {index}")
        self.position[index] = at + len(overlap)
        rest = piece[len(overlap):]
        if not rest:
            return None
        if block.stopped:
            raise ContinuationDiverged(f"the new engine's block {index} is longer than what was sent")
        if overlap:
            delta[name] = rest
            return b"event: content_block_delta\ndata: " + orjson.dumps(data)
        return event
