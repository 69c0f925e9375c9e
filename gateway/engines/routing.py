"""What a request tells the engine layer about where it should go: its routing hints.

With one engine they change nothing. With a fleet (several engines behind the gateway) the
router reads them: the model (only engines serving it qualify), an affinity key (a
session, a conversation, the OpenAI ``user``: the same key goes to the same engine while
it is healthy) and the prompt's prefix (requests sharing it go where it is cached).
Protocols fill them from what they parsed anyway; nothing here reads a body again.

What "the prefix" of an OpenAI request is has one home, :func:`openai_prefix`: for a chat,
the conversation's opening (its system/developer messages and its first user turn), which
every later turn of the same conversation repeats, so the turns of one conversation share
one key while different conversations spread over the fleet even behind one shared system
prompt; for a completion, the prompt's leading part.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

# The leading part of a completion prompt that names its prefix: long enough to hold a
# shared instruction or few-shot block (vLLM caches whole KV blocks: 16 tokens on GPUs by
# default, 128 on the CPU build), short enough that prompts differing only later share it.
COMPLETION_PREFIX_CHARS = 2048
COMPLETION_PREFIX_TOKENS = 512
OPENING_ROLES = frozenset({"system", "developer"})


@dataclass(frozen=True, slots=True)
class RouteHints:
    model: str | None = None          # the engine-side model name the request asks for
    affinity_key: str | None = None   # keeps related requests on one engine
    prefix: bytes | None = None       # the leading part of the prompt, for prefix-cache affinity
    avoid: tuple[str, ...] = ()       # engines (ids) not to use: one that just failed this request
    engine: str | None = None         # this engine only, no failover (the engine layer's own looks)


NO_HINTS = RouteHints()


def openai_prefix(payload: dict) -> bytes | None:
    """The prefix key of an OpenAI chat or completion body (None when it has none)."""
    messages = payload.get("messages")
    if isinstance(messages, list):
        for position, message in enumerate(messages):
            if isinstance(message, dict) and message.get("role") not in OPENING_ROLES:
                return orjson.dumps(messages[:position + 1])
        return orjson.dumps(messages) if messages else None
    prompt = payload.get("prompt")
    if isinstance(prompt, str):
        return prompt[:COMPLETION_PREFIX_CHARS].encode() if prompt else None
    if isinstance(prompt, list) and prompt:
        head = prompt[0] if isinstance(prompt[0], (str, list)) else prompt  # a batch: its first prompt
        if isinstance(head, str):
            return head[:COMPLETION_PREFIX_CHARS].encode()
        try:
            return orjson.dumps(head[:COMPLETION_PREFIX_TOKENS])
        except TypeError:
            return None
    return None


def openai_hints(payload: dict, *, model: str | None, affinity_key: str | None = None,
                 with_prefix: bool = True) -> RouteHints:
    """The hints of an OpenAI body: its model, an affinity key (else its ``user``), its prefix."""
    if affinity_key is None:
        user = payload.get("user")
        affinity_key = user if isinstance(user, str) and user else None
    return RouteHints(model=model, affinity_key=affinity_key,
                      prefix=openai_prefix(payload) if with_prefix else None)
