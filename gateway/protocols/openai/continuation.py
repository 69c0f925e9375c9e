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
dropped and the stream goes on from exactly what clients have (:meth:`ChatReplay.resume`):
the chat with the partial answer as its final assistant message, ``continue_final_message``,
its token budget less what the partial answer takes, so the client still gets one stream with
no repeated or missing text, only no longer the uninterrupted run's rest. That needs the
partial answer to be plain content (no reasoning or tool calls), no structured output (its
grammar would start again) and no text shaped like a chat-template token in it (re-rendered,
it would become prompt structure); otherwise the stream ends with ``continuation_diverged``,
never a spliced answer.
"""

from __future__ import annotations

import asyncio
import re
import unicodedata

import orjson

from gateway.engines.client import EngineClient
from gateway.engines.errors import BadGateway
from gateway.engines.routing import RouteHints
from gateway.relay.continuation import ContinuationDiverged, Replay
from gateway.relay.sse import SEPARATOR, event_json, split_events

DONE = b"data: [DONE]"


def reproducible(payload: dict) -> bool:
    """Whether running ``payload`` again yields the same stream (greedy or seeded, one plain choice)."""
    n = payload.get("n")
    if n is not None and n != 1:
        return False
    if payload.get("tools") or payload.get("functions") or payload.get("logprobs"):
        return False
    seed = payload.get("seed")
    if isinstance(seed, int) and not isinstance(seed, bool):
        return True
    temperature = payload.get("temperature")
    return isinstance(temperature, (int, float)) and not isinstance(temperature, bool) and temperature == 0


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

    async def resume(self, delivered: list[bytes], *, engines: EngineClient, route: RouteHints,
                     request_id: str) -> Replay | None:
        """The chat with what clients have of the answer as its final assistant message, continued."""
        seen = Delivered.read(delivered)
        if seen is None:
            return None
        plan = ResumePlan.of(orjson.loads(self.body), seen)
        if plan is None:
            return None
        prompt_tokens, spent = None, 0
        if plan.partial:
            prompt_tokens, with_partial = await asyncio.gather(
                *(_token_count(engines, request, route=route, request_id=request_id) for request in plan.tokenize))
            # What the partial answer took: as the engine tokenizes its text, or one token per
            # content event if that is more. Re-tokenized text can take more tokens than were
            # generated (byte-level pieces of one character) or fewer (non-canonical merges);
            # vLLM sends at most one event per generated token. The larger keeps the answer
            # within its budget by either count.
            spent = max(with_partial - prompt_tokens, seen.content_events, 0)
            plan.spend(spent)
        return Replay(self.path, orjson.dumps(plan.payload), ContinueDelivered(seen, prompt_tokens, spent))


def continuation_for(payload: dict, *, path: str, body: bytes) -> ChatReplay | None:
    return ChatReplay(path, body) if reproducible(payload) else None


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


class ContinueDelivered:
    """The filter of a resumed stream: every new piece is the stream's own; the role is not sent twice,
    and usage counts the partial answer as completion, not prompt: ``prompt_tokens`` is the original
    prompt's, ``spent`` what the partial answer took of the budget."""

    __slots__ = ("seen", "prompt_tokens", "spent")

    def __init__(self, seen: Delivered, prompt_tokens: int | None, spent: int = 0) -> None:
        self.seen = seen
        self.prompt_tokens = prompt_tokens
        self.spent = spent

    def __call__(self, block: bytes) -> bytes:
        kept = [event for event in map(self._event, split_events(block)) if event is not None]
        return SEPARATOR.join(kept) + SEPARATOR if kept else b""

    def _event(self, event: bytes) -> bytes | None:
        if event.startswith(DONE):
            return event
        data = event_json(event)
        if data is None or "error" in data:
            return event
        seen = self.seen
        if seen.head is not None:
            data["id"], data["created"] = seen.head
        usage = data.get("usage")
        if isinstance(usage, dict) and self.prompt_tokens is not None:
            completion = usage.get("completion_tokens")
            if isinstance(completion, int):
                usage["prompt_tokens"] = self.prompt_tokens
                usage["completion_tokens"] = completion + self.spent
                usage["total_tokens"] = self.prompt_tokens + completion + self.spent
        choices = data.get("choices")
        if not choices:
            return None if seen.usage_sent else _event_bytes(data)
        choice = choices[0]
        delta = choice.get("delta") or {}
        if seen.role_sent:
            delta.pop("role", None)
        if choice.get("finish_reason") or any(piece for piece in delta.values()):
            return _event_bytes(data)
        return None


# What a chat template's own markers look like (``<|im_start|>``, ``<tool_call>``, ``<think>``, ...):
# a partial answer holding one is not re-rendered (the engine would read it as structure).
TEMPLATE_TOKEN = re.compile(r"<\|[^<>|]{0,64}\|>|</?\s*(?:tool_call|tool_response|tools|think)\s*>", re.IGNORECASE)
# Fields that constrain decoding with a grammar from the answer's start: it would start again.
STRUCTURED = ("structured_outputs", "guided_json", "guided_regex", "guided_choice", "guided_grammar",
              "guided_decoding_backend")
# The rendering settings /tokenize takes from a chat request, so its count matches the engine's.
RENDERING = ("model", "chat_template", "chat_template_kwargs", "add_special_tokens", "mm_processor_kwargs")


class ResumePlan:
    """The request that goes on from a partial answer, and the two renderings that say what it costs."""

    __slots__ = ("payload", "partial", "tokenize")

    def __init__(self, payload: dict, partial: str, tokenize: tuple[dict, dict]) -> None:
        self.payload = payload
        self.partial = partial
        self.tokenize = tokenize  # the original prompt, and the prompt with the partial answer

    @classmethod
    def of(cls, payload: dict, seen: Delivered) -> ResumePlan | None:
        """None when the stream cannot go on from ``seen`` (see the module's docstring)."""
        if set(seen.text) - {"content"} or payload.get("echo") or any(payload.get(f) for f in STRUCTURED):
            return None
        response_format = payload.get("response_format")
        if isinstance(response_format, dict) and response_format.get("type") not in (None, "text"):
            return None
        messages = payload.get("messages")
        if not isinstance(messages, list):
            return None
        partial = seen.text.get("content", "")
        if not partial:
            return cls(payload, partial, ({}, {}))
        if TEMPLATE_TOKEN.search(unicodedata.normalize("NFKC", partial)):
            return None
        last = messages[-1] if messages else None
        if payload.get("continue_final_message"):  # the client's own partial assistant turn, continued
            if not (isinstance(last, dict) and last.get("role") == "assistant"
                    and isinstance(last.get("content"), str)):
                return None
            continued = [*messages[:-1], {**last, "content": last["content"] + partial}]
        else:
            continued = [*messages, {"role": "assistant", "content": partial}]
        rendering = {field: payload[field] for field in RENDERING if field in payload}
        original = {**rendering, "messages": messages,
                    "add_generation_prompt": payload.get("add_generation_prompt", True),
                    "continue_final_message": bool(payload.get("continue_final_message"))}
        with_partial = {**rendering, "messages": continued, "add_generation_prompt": False,
                        "continue_final_message": True}
        resumed = {**payload, "messages": continued, "add_generation_prompt": False, "continue_final_message": True}
        return cls(resumed, partial, (original, with_partial))

    def spend(self, tokens: int) -> None:
        """Take what the partial answer used (``tokens``, as the engine renders it) from the budget."""
        payload = self.payload
        for field in ("max_tokens", "max_completion_tokens"):
            value = payload.get(field)
            if isinstance(value, int) and not isinstance(value, bool):
                payload[field] = max(1, value - tokens)
        value = payload.get("min_tokens")
        if isinstance(value, int) and not isinstance(value, bool) and value:
            payload["min_tokens"] = max(0, value - tokens)


async def _token_count(engines: EngineClient, request: dict, *, route: RouteHints, request_id: str) -> int:
    """How many tokens the engine renders ``request`` (a chat) into (vLLM's ``/tokenize``)."""
    answer = await engines.post_json("/tokenize", request, request_id=request_id, route=route)
    count = answer.get("count")
    if not isinstance(count, int) or isinstance(count, bool):
        raise BadGateway("the inference engine's /tokenize answer has no count")
    return count


def _event_bytes(data: dict) -> bytes:
    return b"data: " + orjson.dumps(data)
