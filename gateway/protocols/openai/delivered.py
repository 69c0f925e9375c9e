"""What clients already have of a chat stream, read back from its session's log.

When a stream's engine fails, both ways of going on start from it: a replay elsewhere skips
exactly this and checks it is the same (``openai.continuation``), going on from what was sent
appends to exactly this (``openai.extend``).
"""

from __future__ import annotations

from gateway.relay.sse import event_json

DONE = b"data: [DONE]"


class Delivered:
    """What clients already have of a chat stream: its text per delta field, and which events went out."""

    __slots__ = ("head", "text", "role_sent", "finish_sent", "usage_sent", "content_events")

    def __init__(self) -> None:
        self.head: tuple[object, object] | None = None  # (id, created) of the stream's chunks
        self.text: dict[str, str] = {}                  # "content", "reasoning_content", ...
        self.role_sent = False
        self.finish_sent = False
        self.usage_sent = False
        self.content_events = 0  # events that carried text (vLLM: one per generated token, or more tokens)

    @classmethod
    def read(cls, frames: list[bytes]) -> Delivered | None:
        """None when the stream cannot be continued (it has several choices, an error, its end)."""
        seen = cls()
        parts: dict[str, list[str]] = {}
        for frame in frames:
            data = event_json(frame)
            if data is None:
                if frame.endswith(DONE):
                    return None
                continue
            if "error" in data:
                return None
            if seen.head is None and "id" in data:
                seen.head = (data.get("id"), data.get("created"))
            choices = data.get("choices")
            if not choices:
                seen.usage_sent = seen.usage_sent or "usage" in data
                continue
            for choice in choices:
                if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                    return None
                delta = choice.get("delta") or {}
                if any(isinstance(piece, str) and piece for field, piece in delta.items() if field != "role"):
                    seen.content_events += 1
                for field, piece in delta.items():
                    if field == "role":
                        seen.role_sent = True
                    elif isinstance(piece, str):
                        parts.setdefault(field, []).append(piece)
                    elif piece is not None:
                        return None  # tool calls and the like: not compared, not continued
                if choice.get("finish_reason"):
                    seen.finish_sent = True
        seen.text = {field: "".join(pieces) for field, pieces in parts.items()}
        return seen
