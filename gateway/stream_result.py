"""What a finished stream produced: usage, finish reason and (when asked) the text.

Tracking is cheap by default: the usage chunk is decoded once, other events
are only counted. The text of choice 0 is assembled only for callers that
asked for it (the marketplace stores the assistant's answer).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.sse import event_json


@dataclass(slots=True)
class StreamResult:
    text: str = ""
    finish_reason: str | None = None
    usage: dict | None = None
    how: str = "completed"  # completed | client_disconnect | cancelled | error
    error: str | None = None
    content_events: int = 0

    @property
    def cancelled(self) -> bool:
        return self.how == "cancelled"

    def estimated_usage(self) -> dict | None:
        """For streams cut before the engine's usage chunk: one event per decoded token.

        vLLM emits one chunk per decode step (per choice), so the count of
        content events is the completion tokens generated before the abort.
        Prompt tokens are unknown then and not counted.
        """
        if self.content_events == 0:
            return None
        return {"prompt_tokens": 0, "completion_tokens": self.content_events}


@dataclass(slots=True)
class StreamTracker:
    collect_text: bool = False
    _result: StreamResult = field(default_factory=StreamResult)
    _parts: list[str] = field(default_factory=list)

    def observe(self, event: bytes) -> bool:
        """Account for one ``data:`` event (not [DONE]).

        Returns True for the engine's usage-only chunk (``"choices":[]`` with a usage
        object), so relays can drop it without scanning the event a second time.
        """
        result = self._result
        has_usage = b'"usage":{' in event
        if has_usage:
            data = event_json(event)
            if data is not None and isinstance(data.get("usage"), dict):
                result.usage = data["usage"]
        if b'"choices":[]' in event:
            return has_usage
        result.content_events += 1
        if self.collect_text or b'"finish_reason":"' in event:
            data = event_json(event)
            if data is None:
                return False
            if "error" in data and isinstance(data["error"], dict):
                result.error = str(data["error"].get("message"))
                return False
            for choice in data.get("choices") or ():
                if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                    continue
                if choice.get("finish_reason"):
                    result.finish_reason = choice["finish_reason"]
                if self.collect_text:
                    delta = choice.get("delta") or {}
                    piece = delta.get("content") if isinstance(delta, dict) else None
                    if piece is None:
                        piece = choice.get("text")  # completions stream
                    if isinstance(piece, str):
                        self._parts.append(piece)
        return False

    def result(self) -> StreamResult:
        if self._parts:
            self._result.text = "".join(self._parts)
        return self._result
