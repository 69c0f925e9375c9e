"""What a request body asks of the limiter, from the body alone: its model, a bound on its prompt, its output limit.

The limiter reserves a request's tokens before the engine is asked (docs/keys.md, "How
limits are counted"), so the prompt is bounded here without the engine: a byte-level BPE
token (Qwen's) spans at least one byte of UTF-8 text, so the bytes of the request's text
bound its tokens (``demand.prompt_bound`` adds the chat template's few tokens per message).
Only the fields that become prompt text are counted (the messages' strings, a prompt, an
input, a system prompt, tools), never the field names or JSON punctuation, so a small prompt
is not taken for a large one. Token ids (a completions prompt given as ids) count one each.

The output limit is the protocol's own field; a request without one may still generate up to
the context, so it reserves ``DEFAULT_OUTPUT_TOKENS`` and a stream takes more as it goes.
"""

from __future__ import annotations

from typing import NamedTuple

from gateway.tenancy.limits.demand import prompt_bound

# Output-limit fields, the first present wins: Chat (new, old), Completions/Anthropic, Responses.
OUTPUT_FIELDS = ("max_completion_tokens", "max_tokens", "max_output_tokens")
# Fields whose strings become prompt tokens (OpenAI, Anthropic, Responses, the engine's pooling routes).
PROMPT_FIELDS = ("messages", "prompt", "input", "system", "instructions", "tools", "functions", "documents",
                 "query", "text_1", "text_2", "suffix")
_PROMPT_FIELDS = frozenset(PROMPT_FIELDS)
DEFAULT_OUTPUT_TOKENS = 4096  # reserved when a request names no output limit (docs/keys.md)
MAX_DEPTH = 32


class Estimate(NamedTuple):
    """(A named tuple: one per request of a limited key, several times cheaper to build than a frozen dataclass.)"""

    model: str | None
    prompt_tokens: int       # at most this many prompt tokens
    max_tokens: int          # the output asked for (or DEFAULT_OUTPUT_TOKENS)
    output_field: str | None  # the field that said it, None when the body names none
    produces_output: bool    # False for embeddings, scores and the like: nothing is generated


def estimate(payload: dict | None, *, body_bytes: int = 0, generates: bool = True) -> Estimate:
    """The estimate for ``payload`` (None: a body that is not JSON, bounded by its size)."""
    if payload is None:
        return Estimate(None, prompt_bound(body_bytes), 0, None, False)
    model = payload.get("model")
    text = 0
    messages = 1
    for name in _PROMPT_FIELDS.intersection(payload):  # (the body's few fields, not a lookup of each of ours)
        value = payload[name]
        if value is not None:
            text += _text_bytes(value, 0)
            if (name == "messages" or name == "input") and isinstance(value, list):
                messages += len(value)
    field, asked = None, None
    for name in OUTPUT_FIELDS:
        value = payload.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            field, asked = name, value
            break
    if not generates:
        asked = 0
    elif asked is None:
        asked = DEFAULT_OUTPUT_TOKENS
    return Estimate(model if isinstance(model, str) else None, prompt_bound(text, messages), asked, field,
                    generates)


def _text_bytes(value: object, depth: int) -> int:
    # The JSON types by exact type first (what a parsed body holds), each string of a list or an
    # object counted in place: this runs for every request of a limited key.
    kind = type(value)
    if kind is str:
        return len(value) if value.isascii() else len(value.encode())  # type: ignore[attr-defined]
    if kind is list or kind is dict:
        if depth >= MAX_DEPTH:
            return 0
        total = 0
        if kind is dict:  # (a message: its text fields in place, no list of them made)
            for key, item in value.items():  # type: ignore[attr-defined]
                if key in _NOT_TEXT:
                    continue
                if type(item) is str and item.isascii():
                    total += len(item)
                else:
                    total += _text_bytes(item, depth + 1)
            return total
        for item in value:  # type: ignore[attr-defined]
            if type(item) is str and item.isascii():
                total += len(item)
            else:
                total += _text_bytes(item, depth + 1)
        return total
    return _other_bytes(value, depth)


def _other_bytes(value: object, depth: int) -> int:
    """``_text_bytes`` of anything else (a subclass of a JSON type, as a feature's payload may hold)."""
    if isinstance(value, str):
        return len(value.encode()) if not value.isascii() else len(value)
    if isinstance(value, bool) or value is None:
        return 0
    if isinstance(value, int | float):
        return 1  # a token id (or a number that becomes a few characters of text)
    if depth >= MAX_DEPTH:
        return 0
    if isinstance(value, list):
        return sum(_text_bytes(item, depth + 1) for item in value)
    if isinstance(value, dict):
        return sum(_text_bytes(item, depth + 1) for key, item in value.items() if key not in _NOT_TEXT)
    return 0


# Keys inside messages whose values are not prompt text (ids, roles count as template tokens).
_NOT_TEXT = frozenset({"role", "type", "id", "tool_call_id", "cache_control", "name", "image_url", "detail"})
