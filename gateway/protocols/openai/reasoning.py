"""A chat answer's reasoning under both of its names: ``reasoning`` and ``reasoning_content``.

vLLM put a reasoning model's thinking in ``reasoning_content`` (the name DeepSeek's API
chose) until it renamed the field ``reasoning`` (vllm#27752, Nov 2025: both names sent for a
while) and then dropped ``reasoning_content`` from its output (vllm#33402, Jan 2026; the engine
here sends only ``reasoning``). Clients read one name or the other: LiteLLM, the Vercel AI SDK's
interleaved thinking, Claude Code Router and most DeepSeek-era code read ``reasoning_content``;
OpenRouter-style clients and vLLM's own examples read ``reasoning`` (vllm#50624 documents the
silent loss). A gateway that relays whatever its engine names it hides the reasoning from
half of them, so every chat answer and chunk that carries one name gets the other with the
same text (in ``message`` and in ``delta``). The request side needs nothing: vLLM accepts both names in an
assistant message it is sent back (vllm#42664).

Cost (``bench.reasoning_names``, docs/benchmarks.md): one byte search per engine read
without reasoning; in a read with reasoning (every read of a thinking phase) the string is
found and copied in the event's bytes, without decoding the JSON.
"""

from __future__ import annotations

import orjson

NAMES = ("reasoning", "reasoning_content")
# Both names start so; JSON escapes a quote inside a string, so this only matches a key (or a
# ``"reasoning_tokens"`` usage key, read and left alone).
MARK = b'"reasoning'


def name_both(part: dict) -> bool:
    """Give ``part`` (a ``message`` or a ``delta``) the reasoning under the name it lacks; True if it changed."""
    first, second = (part.get(name) for name in NAMES)
    if isinstance(first, str) and second is None:
        part[NAMES[1]] = first
        return True
    if isinstance(second, str) and first is None:
        part[NAMES[0]] = second
        return True
    return False


def _choices_named_both(data: dict, key: str) -> bool:
    changed = False
    for choice in data.get("choices") or ():
        part = choice.get(key) if isinstance(choice, dict) else None
        if isinstance(part, dict):
            changed = name_both(part) or changed
    return changed


KEYS = tuple(b'"' + name.encode() + b'":' for name in NAMES)


def _string_end(data: bytes, quote: int) -> int:
    """Where the JSON string opening at ``quote`` closes (its first quote not escaped)."""
    at = quote + 1
    while True:
        at = data.index(b'"', at)
        back = at - 1
        while data[back] == 0x5C:  # a backslash
            back -= 1
        if (at - 1 - back) % 2 == 0:
            return at
        at += 1


def stream_block(block: bytes) -> bytes:
    """A block of chat chunks with each delta's reasoning string copied under the other name, in its bytes.

    An engine writes every delta's reasoning under one name (or under both, and then nothing
    changes): each string's bytes are copied as they are, right after it, under the name
    missing. No splitting into events, no decoding: the keys are counted in the whole block.
    """
    if MARK not in block:
        return block
    counts = [block.count(key) for key in KEYS]
    if counts[0] == counts[1]:  # both names in every delta, or neither (a "reasoning_tokens" key)
        return block
    present = 0 if counts[0] > counts[1] else 1
    key, other = KEYS[present], KEYS[1 - present]
    parts: list[bytes] = []
    done = 0
    at = block.find(key)
    while at >= 0:
        value = at + len(key)
        if block[value:value + 1] == b'"':
            end = _string_end(block, value) + 1
            parts += (block[done:end], b",", other, block[value:end])
            done = end
        at = block.find(key, value)
    if not parts:
        return block
    parts.append(block[done:])
    return b"".join(parts)


def _some_string(body: bytes) -> bool:
    """Whether a ``"reasoning…"`` key in ``body`` may have a string value (False: each is null, or
    a number such as ``reasoning_tokens``, so nothing needs naming and the answer need not be parsed).

    Errs towards True: a key-like text inside a string value (its quote escaped) counts too.
    """
    at = body.find(MARK)
    while at >= 0:
        key_end = body.find(b'"', at + 1)
        if key_end < 0:
            return True
        rest = body[key_end + 1:key_end + 64].lstrip()
        if rest[:1] != b":" or rest[1:].lstrip()[:1] in (b'"', b""):
            return True
        at = body.find(MARK, key_end)
    return False


async def answer(body: bytes) -> bytes:
    """A non-streamed chat completion with every message's reasoning under both names."""
    if MARK not in body or not _some_string(body):  # vLLM's answers without reasoning: "reasoning":null
        return body
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body
    if isinstance(data, dict) and _choices_named_both(data, "message"):
        return orjson.dumps(data)
    return body
