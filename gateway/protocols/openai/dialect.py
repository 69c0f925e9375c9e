"""The OpenAI streaming dialect: chat-completion and completion chunks, ``data: [DONE]`` at the end.

vLLM sends one ``data: {...}`` event per decode step and, when asked with
``stream_options.include_usage``, a last chunk with ``"choices":[]`` and the usage. The
gateway always asks for it (per-key accounting) and drops it again for clients that did
not. Tracking is cheap by default: a few byte searches per event, JSON decoded only for the
usage chunk and, for a traced stream, the chunk before it that ends the choice (its finish
reason), or for every event when a caller wants the text (the marketplace stores the
answer it streamed). Chunks with reasoning get it under both of its names (``reasoning``).
"""

from __future__ import annotations

import time

import orjson

from gateway.http.errors import ERROR_TYPES_BY_CODE
from gateway.protocols.openai import reasoning
from gateway.relay.dialect import StreamResult
from gateway.relay.sse import SEPARATOR, event_json, split_events

DONE = b"data: [DONE]"
DONE_FRAME_TAIL = DONE + b"\n\n"
ROLE_FIELD = b'"role":"assistant"'
# A chunk that ends a choice: vLLM writes '"finish_reason":null' in every other chunk, and JSON
# escapes the quotes inside strings, so this only ever marks a real finish reason.
FINISH_FIELD = b'"finish_reason":"'
# finish_reason of the chunk that ends a cancelled generation (not an OpenAI value: clients
# that switch on finish_reason see something they can tell apart from "stop" and "length").
CANCELLED_FINISH_REASON = "cancelled"
CHUNK_ID_PREFIX = "chatcmpl-"  # vLLM's chat chunk ids: the prefix, then the request's id


def error_event(message: str, *, type: str = "upstream_error", code: str | None = None) -> bytes:
    """An OpenAI-style error event, for failures after the stream has started."""
    return b"data: " + orjson.dumps({"error": {"message": message, "type": type, "param": None, "code": code}})


def _last_two_events(block: bytes) -> int:
    """Where the last two events of ``block`` (whole events, each ending in a blank line) start."""
    end_of_third_last = block.rfind(SEPARATOR, 0, max(0, block.rfind(SEPARATOR, 0, len(block) - 2)))
    return end_of_third_last + len(SEPARATOR) if end_of_third_last >= 0 else 0


class OpenAITracker:
    __slots__ = ("ended", "_relay_usage", "_collect_text", "_count_events", "_finish_reason", "_previous", "_result",
                 "_parts", "_first_read")

    def __init__(self, *, relay_usage: bool, collect_text: bool, count_events: bool = True,
                 finish_reason: bool = False) -> None:
        self.ended = False
        self._relay_usage = relay_usage
        self._collect_text = collect_text
        # A search of every read for it would cost about 0.5 us a read (JSON's many quotes
        # defeat the byte search's skips): it is looked for only when a caller wants it (a
        # traced stream), and only once the usage chunk arrives, in that read and the one
        # before (``_previous``): the chunk that ends a one-choice stream comes right before it.
        self._finish_reason = finish_reason
        self._previous = b""
        # A session's log counts its events itself: it splits every block anyway.
        self._count_events = count_events
        self._result = StreamResult(content_events=0 if count_events else None)
        self._parts: list[str] = []
        self._first_read = True

    def accept(self, block: bytes) -> bytes:
        if reasoning.MARK in block:
            block = reasoning.stream_block(block)
        if self._first_read:
            # A chat stream opens with one role-only chunk per choice (vLLM: in its first
            # read): events, but no token. A completion stream has none. JSON escapes the
            # quotes inside strings, so the key is only ever a real role field.
            self._first_read = False
            self._result.preamble_events = block.count(ROLE_FIELD)
        if self._collect_text:
            kept = self.accept_events(split_events(block))
            return SEPARATOR.join(kept) + SEPARATOR if kept else b""
        # Most reads carry content chunks only: nothing to read in them, nothing to change.
        # vLLM's usage-only chunk and [DONE] are a stream's last two events, so a block
        # holds them only among its own last two: look there, not through a block that may
        # have coalesced a whole stream (a scan of every byte per read).
        tail = block[_last_two_events(block):]
        if b'"usage":{' not in tail and DONE not in tail:
            if self._count_events:
                self._result.content_events += block.count(SEPARATOR)
            if self._finish_reason:
                self._previous = block
            return block
        if self._finish_reason and self._result.finish_reason is None:
            if not self._note_finish(block):  # (a finish in this read is the later one: it wins)
                self._note_finish(self._previous)
            self._previous = b""
        # The stream's last events (or every event, with continuous usage stats): read one by
        # one from the first mark on. JSON escapes the quotes of a string, so '"usage":{'
        # only marks a real usage field; a "data: [DONE]" inside a content string costs a
        # few more events read, nothing else.
        marks = [at for at in (block.find(b'"usage":{'), block.find(DONE)) if at >= 0]
        previous_end = block.rfind(SEPARATOR, 0, min(marks))
        cut = previous_end + len(SEPARATOR) if previous_end >= 0 else 0
        head = block[:cut]
        if self._count_events:
            self._result.content_events += head.count(SEPARATOR)
        kept = self.accept_events(split_events(block[cut:]))
        return head + SEPARATOR.join(kept) + SEPARATOR if kept else head

    def accept_events(self, events: list[bytes]) -> list[bytes]:
        """The per-event reading: usage, [DONE], and (when collected) the text of choice 0."""
        result = self._result
        kept = events
        for position, event in enumerate(events):
            if event.startswith(DONE):
                self.ended = True
                if kept is not events:
                    kept.append(event)
                elif position + 1 < len(events):  # nothing is relayed after [DONE]
                    kept = events[:position + 1]
                break
            if b'"usage":{' in event:
                data = event_json(event)
                if data is not None and isinstance(data.get("usage"), dict):
                    result.usage = data["usage"]
                if b'"choices":[]' in event:  # the usage-only chunk
                    if not self._relay_usage:
                        if kept is events:
                            kept = events[:position]
                        continue
                    if kept is not events:
                        kept.append(event)
                    continue
            if kept is not events:
                kept.append(event)
            if self._count_events:
                result.content_events += 1
            if self._collect_text:
                self._read_choice(event)
        return kept

    def _note_finish(self, block: bytes) -> bool:
        """Choice 0's last finish reason in ``block``, if any (whether found).

        Searched from the end, one event at a time: the finish sits right before the usage
        chunk, and a read may hold a whole coalesced stream (splitting it and searching each
        of its events cost about 0.5 us an event: 130 us for 256 chunks in one read).
        """
        end = len(block)
        while True:
            at = block.rfind(FINISH_FIELD, 0, end)
            if at < 0:
                return False
            start = block.rfind(SEPARATOR, 0, at)
            start = start + len(SEPARATOR) if start >= 0 else 0
            stop = block.find(SEPARATOR, at)
            data = event_json(block[start:stop if stop >= 0 else len(block)])
            for choice in (data.get("choices") or ()) if data is not None else ():
                if isinstance(choice, dict) and choice.get("index", 0) == 0 \
                        and isinstance(choice.get("finish_reason"), str):
                    self._result.finish_reason = choice["finish_reason"]
                    return True
            end = start

    def _read_choice(self, event: bytes) -> None:
        data = event_json(event)
        if data is None:
            return
        if isinstance(data.get("error"), dict):
            self._result.error = str(data["error"].get("message"))
            return
        for choice in data.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            if choice.get("finish_reason"):
                self._result.finish_reason = choice["finish_reason"]
            delta = choice.get("delta") or {}
            piece = delta.get("content") if isinstance(delta, dict) else None
            if piece is None:
                piece = choice.get("text")  # completions stream
            if isinstance(piece, str):
                self._parts.append(piece)

    def result(self) -> StreamResult:
        if self._parts:
            self._result.text = "".join(self._parts)
        return self._result


class OpenAIDialect:
    name = "openai"

    def tracker(self, *, relay_usage: bool, collect_text: bool, count_events: bool = True,
                finish_reason: bool = False) -> OpenAITracker:
        return OpenAITracker(relay_usage=relay_usage, collect_text=collect_text, count_events=count_events,
                             finish_reason=finish_reason)

    def error_events(self, message: str, code: str) -> list[bytes]:
        return [error_event(message, type=ERROR_TYPES_BY_CODE.get(code, "upstream_error"), code=code), DONE]

    def is_last(self, frame: bytes) -> bool:
        return frame.endswith(DONE_FRAME_TAIL)

    def cancelled_events(self, *, first_event: bytes | None, reason: str, run_id: str,
                         model: object, choices: int, usage: dict | None = None) -> list[bytes]:
        """A chunk whose every choice ends with finish_reason "cancelled", then [DONE].

        It copies ``id``, ``created``, ``object`` and ``model`` from the generation's first
        chunk, so it reads as the stream's own last chunk; a stream stopped before its first
        chunk gets vLLM's id format for the run (``chatcmpl-<id>``).
        """
        head = (event_json(first_event) if first_event is not None else None) or {}
        chunk = {
            "id": head.get("id", CHUNK_ID_PREFIX + run_id),
            "object": head.get("object", "chat.completion.chunk"),
            "created": head.get("created", int(time.time())),
            "model": head.get("model", model),
            "choices": [
                {"index": i, "delta": {}, "logprobs": None, "finish_reason": CANCELLED_FINISH_REASON}
                for i in range(choices)
            ],
            "cancel_reason": reason,
        }
        return [b"data: " + orjson.dumps(chunk), DONE]


OPENAI = OpenAIDialect()
