"""Continuing an OpenAI chat stream on another engine: replay the request there, skip what clients have.

Choice (docs/fleet.md, "A stream that survives its engine"): the new engine receives the
original request again, with the same sampling settings and seed, and the gateway drops the
part of its stream that clients already received. The other way measured, continuing from
the engine-rendered prompt plus the generated token ids on ``/v1/completions`` (one prefill
instead of a whole re-generation), reproduced the uninterrupted greedy run exactly on this
AMD host but not on the Intel AMX host the issue reports (it diverged from about 80 tokens
on: prefill and decode compute slightly different numbers there), and continuing through
text (``continue_final_message``) diverges at once (re-tokenizing generated text gives other
ids). Replay was exact on both hosts: it reproduces a run wherever two runs of one request
agree at all. It costs re-generating what was already sent (the client sees a pause, with
keep-alives), and it needs no change to the stream (no ``return_token_ids``) and no work per
event until an engine fails.

Only requests whose run is reproducible are continued: greedy (``temperature: 0``) or seeded
(``seed``), one choice, no ``logprobs``, no tools. While skipping, every replayed piece of text
is compared with what clients have; on a mismatch (two runs of one greedy request do not
always agree: on the vLLM CPU engine a prefix-cache hit can change the answer) the replay is
dropped and the stream goes on from exactly what clients have (:meth:`ChatReplay.extend`,
``openai.extend``), so the client still gets one stream with no repeated or missing text, only
no longer the uninterrupted run's rest; when even that is impossible the stream ends with
``continuation_diverged``, never a spliced answer.
"""

from __future__ import annotations

import orjson

from gateway.engines.client import EngineClient
from gateway.engines.routing import RouteHints
from gateway.http.context import RequestContext
from gateway.protocols.common.sampling import greedy_or_seeded
from gateway.protocols.openai import reasoning
from gateway.protocols.openai.delivered import DONE, Delivered
from gateway.protocols.openai.extend import extend_from
from gateway.relay.continuation import ContinuationDiverged, Replay
from gateway.relay.sse import SEPARATOR, event_json, split_events


def reproducible(payload: dict) -> bool:
    """Whether running ``payload`` again yields the same stream (greedy or seeded, one plain choice)."""
    n = payload.get("n")
    if n is not None and n != 1:
        return False
    if payload.get("tools") or payload.get("functions") or payload.get("logprobs"):
        return False
    return greedy_or_seeded(payload)


class ChatReplay:
    """The continuation of one chat completion stream (``relay.continuation.Continuation``)."""

    __slots__ = ("path", "body")

    def __init__(self, path: str, body: bytes) -> None:
        self.path = path
        self.body = body

    def replay(self, delivered: list[bytes]) -> Replay | None:
        seen = Delivered.read(delivered)
        if seen is None:
            return None
        return Replay(self.path, self.body, SkipDelivered(seen))

    async def extend(self, delivered: list[bytes], *, engines: EngineClient, route: RouteHints,
                     request: RequestContext) -> Replay | None:
        """The chat with what clients have of the answer as its final assistant message, continued."""
        seen = Delivered.read(delivered)
        if seen is None:
            return None
        return await extend_from(seen, path=self.path, body=self.body, engines=engines, route=route, request=request)


def continuation_for(payload: dict, *, path: str, body: bytes) -> ChatReplay | None:
    return ChatReplay(path, body) if reproducible(payload) else None


class SkipDelivered:
    """The replay filter: drop what clients have (checking it is the same), pass the rest as the stream's own."""

    __slots__ = ("seen", "position")

    def __init__(self, seen: Delivered) -> None:
        self.seen = seen
        self.position = {field: 0 for field in seen.text}

    def pending(self) -> bool:
        return any(self.position[field] < len(text) for field, text in self.seen.text.items())

    def __call__(self, block: bytes) -> bytes:
        kept = [event for event in map(self._event, split_events(block)) if event is not None]
        return SEPARATOR.join(kept) + SEPARATOR if kept else b""

    def _event(self, event: bytes) -> bytes | None:
        if event.startswith(DONE):
            if self.pending():
                raise ContinuationDiverged("the new engine's answer is shorter than what was already sent")
            return event
        data = event_json(event)
        if data is None or "error" in data:
            return event  # the new engine failed too: its error ends the stream
        seen = self.seen
        if seen.head is not None:
            data["id"], data["created"] = seen.head
        choices = data.get("choices")
        if not choices:
            return None if seen.usage_sent else _event_bytes(data)
        choice = choices[0]
        delta = choice.get("delta") or {}
        reasoning.name_both(delta)  # as clients got it (the tracker names it both ways after this filter)
        keep = False
        for field in list(delta):
            piece = delta[field]
            if field == "role":
                if seen.role_sent:
                    del delta[field]
                else:
                    keep = True
                continue
            if not isinstance(piece, str):
                if piece is not None:
                    raise ContinuationDiverged(f"the new engine's answer has '{field}', which is not compared")
                continue
            text = seen.text.get(field, "")
            at = self.position.get(field, 0)
            if at < len(text):
                overlap = text[at:at + len(piece)]
                if not piece.startswith(overlap):
                    raise ContinuationDiverged(f"the new engine generated other text at character {at}")
                self.position[field] = at + len(overlap)
                piece = delta[field] = piece[len(overlap):]
            if piece:
                keep = True
        if choice.get("finish_reason"):
            if self.pending():
                raise ContinuationDiverged("the new engine finished before reaching what was already sent")
            if seen.finish_sent:
                return None
            keep = True
        return _event_bytes(data) if keep else None


def _event_bytes(data: dict) -> bytes:
    return b"data: " + orjson.dumps(data)
