"""Continuing a Responses stream on another engine: replay the request there, skip what clients have.

The same choice as for OpenAI chats (``openai.continuation``): the new engine gets the
original request again (the same ``request_id``: the response keeps its id) and the gateway
drops the part of its stream clients already received, checking that it is the same. What
clients have is read from the session's log: which lifecycle events went out, each output
item (its id, as clients know it) and content part, the text of each, which parts and items
were closed. The replay's events then read as the stream's own: numbered on from the last
``sequence_number`` clients have, its item ids replaced by theirs (vLLM makes new random ones
per run), its deltas trimmed to what is new, the final response object carrying the ids and
``created_at`` clients know.

Only reproducible requests are continued: greedy (``temperature: 0``) or seeded (``seed``), no
tools; and only streams of message and reasoning text. vLLM's Responses route cannot go on
from a partial answer: when a replay produces other text than clients have, the stream ends
with ``error`` and ``response.failed``, never a spliced answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from gateway.engines.client import EngineClient
from gateway.engines.routing import RouteHints
from gateway.http.context import RequestContext
from gateway.protocols.common.sampling import greedy_or_seeded
from gateway.protocols.responses.dialect import TERMINAL_TYPES
from gateway.relay.continuation import ContinuationDiverged, Replay
from gateway.relay.sse import SEPARATOR, event_json, split_events

LIFECYCLE = ("response.created", "response.in_progress", "response.queued")
TEXT_DELTAS = ("response.output_text.delta", "response.reasoning_text.delta")
PART_EVENTS = ("response.content_part.added", "response.content_part.done", "response.output_text.done",
               "response.reasoning_text.done")
ITEM_KINDS = ("message", "reasoning")


def reproducible(payload: dict) -> bool:
    """Whether running ``payload`` again yields the same stream (greedy or seeded, no tools)."""
    if payload.get("tools"):
        return False
    return greedy_or_seeded(payload)


@dataclass(slots=True)
class Item:
    id: str
    kind: str
    texts: dict[int, str] = field(default_factory=dict)  # content index -> its text so far


@dataclass(slots=True)
class DeliveredResponse:
    """What clients already have of a Responses stream."""

    lifecycle: set[str] = field(default_factory=set)
    items: dict[int, Item] = field(default_factory=dict)   # output index -> item
    sent: set[tuple] = field(default_factory=set)          # (type, output index, content index) of parts' events
    created_at: object = None
    events: int = 0  # every event clients have: the next sequence number

    @classmethod
    def read(cls, frames: list[bytes]) -> DeliveredResponse | None:
        """None when the stream cannot be continued (it ended, failed, or holds more than text)."""
        seen = cls(events=len(frames))
        for frame in frames:
            data = event_json(frame)
            if data is None:
                return None
            kind = data.get("type")
            if kind in LIFECYCLE:
                seen.lifecycle.add(kind)
                response = data.get("response") or {}
                if seen.created_at is None:
                    seen.created_at = response.get("created_at")
            elif kind == "response.output_item.added":
                item = data.get("item") or {}
                if item.get("type") not in ITEM_KINDS:
                    return None
                seen.items[data.get("output_index")] = Item(str(item.get("id")), item["type"])
            elif kind == "response.output_item.done" or kind in PART_EVENTS or kind in TEXT_DELTAS:
                found = seen.items.get(data.get("output_index"))
                if found is None:
                    return None
                content = data.get("content_index")
                if kind in TEXT_DELTAS:
                    found.texts[content] = found.texts.get(content, "") + str(data.get("delta") or "")
                else:
                    if kind == "response.content_part.added":
                        found.texts.setdefault(content, "")
                    seen.sent.add((kind, data.get("output_index"), content))
            else:  # the end, an error, or events that are not compared (tool calls)
                return None
        return seen


class ResponseReplay:
    """The continuation of one Responses stream (``relay.continuation.Continuation``)."""

    __slots__ = ("path", "body")

    def __init__(self, path: str, body: bytes) -> None:
        self.path = path
        self.body = body

    def replay(self, delivered: list[bytes]) -> Replay | None:
        seen = DeliveredResponse.read(delivered)
        if seen is None:
            return None
        return Replay(self.path, self.body, SkipDelivered(seen))

    async def extend(self, delivered: list[bytes], *, engines: EngineClient, route: RouteHints,
                     request: RequestContext) -> Replay | None:
        return None  # vLLM's Responses route cannot continue a partial answer (see the module's docstring)


def continuation_for(payload: dict, *, path: str, body: bytes) -> ResponseReplay | None:
    return ResponseReplay(path, body) if reproducible(payload) else None


class SkipDelivered:
    """The replay filter: drop what clients have (checking it is the same), renumber and rename the rest."""

    __slots__ = ("seen", "position", "ids", "sequence")

    def __init__(self, seen: DeliveredResponse) -> None:
        self.seen = seen
        self.position: dict[tuple[int, int], int] = {}  # (output index, content index) -> characters matched
        self.ids: dict[str, str] = {}                    # the new engine's item id -> the one clients know
        self.sequence = seen.events

    def __call__(self, block: bytes) -> bytes:
        kept = [event for event in map(self._event, split_events(block)) if event is not None]
        return SEPARATOR.join(kept) + SEPARATOR if kept else b""

    def _pending(self, index: int | None = None) -> bool:
        """Whether some text clients have (of output item ``index``, or of any) was not matched yet."""
        items = self.seen.items.items() if index is None else [(index, self.seen.items[index])]
        for at, item in items:
            for content, text in item.texts.items():
                if self.position.get((at, content), 0) < len(text):
                    return True
        return False

    def _event(self, event: bytes) -> bytes | None:
        data = event_json(event)
        if data is None:
            return event
        kind, seen = data.get("type"), self.seen
        if kind in LIFECYCLE:
            if kind in seen.lifecycle:
                return None
        elif kind == "response.output_item.added":
            index, item = data.get("output_index"), data.get("item") or {}
            known = seen.items.get(index)
            if known is not None:
                if item.get("type") != known.kind:
                    raise ContinuationDiverged(f"the new engine's output item {index} is of another kind")
                self.ids[str(item.get("id"))] = known.id
                return None
            if self._pending():
                raise ContinuationDiverged("the new engine added an output item before reaching what was sent")
        elif kind in TEXT_DELTAS:
            trimmed = self._text(data)
            if trimmed is None:
                return None
        elif kind in PART_EVENTS or kind == "response.output_item.done":
            if self._already_sent(data, kind):
                return None
        elif kind in TERMINAL_TYPES:
            if self._pending():
                raise ContinuationDiverged("the new engine finished before reaching what was already sent")
            response = data.get("response") or {}
            for item in response.get("output") or ():
                if isinstance(item, dict) and item.get("id") in self.ids:
                    item["id"] = self.ids[item["id"]]
            if seen.created_at is not None:
                response["created_at"] = seen.created_at
        elif kind != "error":
            raise ContinuationDiverged(f"the new engine's stream has a {kind} event, which is not compared")
        self._rename(data)
        data["sequence_number"] = self.sequence
        self.sequence += 1
        head = event[:event.index(b"\n") + 1] if event.startswith(b"event:") else b""
        return head + b"data: " + orjson.dumps(data)

    def _rename(self, data: dict) -> None:
        item_id = data.get("item_id")
        if item_id in self.ids:
            data["item_id"] = self.ids[item_id]
        item = data.get("item")
        if isinstance(item, dict) and item.get("id") in self.ids:
            item["id"] = self.ids[item["id"]]

    def _already_sent(self, data: dict, kind: str) -> bool:
        """Whether clients have this closing (or part-opening) event; a close before the text is matched diverges."""
        index, content = data.get("output_index"), data.get("content_index")
        if index not in self.seen.items:
            return False
        if kind != "response.content_part.added" and self._pending(index):
            raise ContinuationDiverged(f"the new engine's output item {index} is shorter than what was sent")
        return (kind, index, content) in self.seen.sent

    def _text(self, data: dict) -> dict | None:
        """A delta trimmed to what clients do not have (None: nothing new in it)."""
        index, content = data.get("output_index"), data.get("content_index")
        piece = str(data.get("delta") or "")
        known = self.seen.items.get(index)
        text = known.texts.get(content) if known is not None else None
        if text is None:
            if self._pending():
                raise ContinuationDiverged("the new engine went on elsewhere before reaching what was sent")
            return data
        at = self.position.get((index, content), 0)
        overlap = text[at:at + len(piece)]
        if not piece.startswith(overlap):
            raise ContinuationDiverged(f"the new engine generated other text at character {at} of part "
                                       f"{index}.{content}")
        self.position[(index, content)] = at + len(overlap)
        rest = piece[len(overlap):]
        if not rest:
            return None
        if ("response.content_part.done", index, content) in self.seen.sent:
            raise ContinuationDiverged(f"the new engine's part {index}.{content} is longer than what was sent")
        data["delta"] = rest
        return data
