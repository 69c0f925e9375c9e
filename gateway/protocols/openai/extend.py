"""Extending what clients received of a chat stream on another engine, when a replay there diverged.

A replay (``openai.continuation``) reproduces a run only when the new engine computes what the
old one did; on the vLLM CPU engine a prefix-cache hit or another batch can change a greedy
answer. Then the gateway sends the chat again with the partial answer (the text of every
content delta clients have) as its final assistant message, ``continue_final_message: true``
and ``add_generation_prompt: false``, so the engine continues that message; its token budget
loses what the partial answer took, counted by the engine itself (``/tokenize`` of the chat
with and without it) and at least one token per content event. The new engine's events then
read as the stream's own: the same ``id`` and ``created``, no second role chunk, usage as one
answer's (the original prompt; the partial answer counted as completion).

Impossible, and the stream ends with the error instead, when the partial answer has more than
plain content (reasoning, tool calls), the request constrains decoding from the answer's start
(a grammar would start again), asks for ``echo``, or was complete already; and when the
partial answer holds text shaped like a chat-template token: re-rendered, the engine would read
it as prompt structure, and untrusted text never becomes that.
"""

from __future__ import annotations

import asyncio
import re
import unicodedata

import orjson

from gateway.engines.client import EngineClient
from gateway.engines.errors import BadGateway
from gateway.engines.routing import RouteHints
from gateway.http.context import RequestContext
from gateway.protocols.openai.delivered import DONE, Delivered
from gateway.relay.continuation import Replay
from gateway.relay.sse import SEPARATOR, event_json, split_events

# What a chat template's own markers look like (``<|im_start|>``, ``<tool_call>``, ``<think>``, ...):
# a partial answer holding one is not re-rendered (the engine would read it as structure).
TEMPLATE_TOKEN = re.compile(r"<\|[^<>|]{0,64}\|>|</?\s*(?:tool_call|tool_response|tools|think)\s*>", re.IGNORECASE)
# Fields that constrain decoding with a grammar from the answer's start: it would start again.
STRUCTURED = ("structured_outputs", "guided_json", "guided_regex", "guided_choice", "guided_grammar",
              "guided_decoding_backend")
# The rendering settings /tokenize takes from a chat request, so its count matches the engine's.
RENDERING = ("model", "chat_template", "chat_template_kwargs", "add_special_tokens", "mm_processor_kwargs")


async def extend_from(seen: Delivered, *, path: str, body: bytes, engines: EngineClient, route: RouteHints,
                      request: RequestContext) -> Replay | None:
    """The request that continues ``seen`` (what clients have of the stream of ``body``), or None."""
    plan = ExtendPlan.of(orjson.loads(body), seen)
    if plan is None:
        return None
    prompt_tokens, spent = None, 0
    if plan.partial:
        prompt_tokens, with_partial = await asyncio.gather(
            *(token_count(engines, chat, route=route, request=request) for chat in plan.tokenize))
        # What the partial answer took: as the engine tokenizes its text, or one token per content
        # event if that is more. Re-tokenized text can take more tokens than were generated
        # (byte-level pieces of one character) or fewer (non-canonical merges); vLLM sends at most
        # one event per generated token. The larger keeps the answer within its budget by either count.
        spent = max(with_partial - prompt_tokens, seen.content_events, 0)
        plan.spend(spent)
    return Replay(path, orjson.dumps(plan.payload), ContinueDelivered(seen, prompt_tokens, spent))


class ContinueDelivered:
    """The filter of an extended stream: every new piece is the stream's own; the role is not sent twice,
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




class ExtendPlan:
    """The request that goes on from a partial answer, and the two renderings that say what it costs."""

    __slots__ = ("payload", "partial", "tokenize")

    def __init__(self, payload: dict, partial: str, tokenize: tuple[dict, dict]) -> None:
        self.payload = payload
        self.partial = partial
        self.tokenize = tokenize  # the original prompt, and the prompt with the partial answer

    @classmethod
    def of(cls, payload: dict, seen: Delivered) -> ExtendPlan | None:
        """None when the stream cannot go on from ``seen`` (see the module's docstring)."""
        if set(seen.text) - {"content"} or payload.get("echo") or any(payload.get(f) for f in STRUCTURED):
            return None
        if seen.finish_sent:  # the answer was complete (only its usage and [DONE] were missing): nothing to add
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
        extended = {**payload, "messages": continued, "add_generation_prompt": False, "continue_final_message": True}
        return cls(extended, partial, (original, with_partial))

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


async def token_count(engines: EngineClient, chat: dict, *, route: RouteHints, request: RequestContext) -> int:
    """How many tokens the engine renders ``chat`` into (vLLM's ``/tokenize``)."""
    answer = await engines.post_json("/tokenize", chat, request=request, route=route)
    count = answer.get("count")
    if not isinstance(count, int) or isinstance(count, bool):
        raise BadGateway("the inference engine's /tokenize answer has no count")
    return count


def _event_bytes(data: dict) -> bytes:
    return b"data: " + orjson.dumps(data)
