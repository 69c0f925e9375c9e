"""The GenAI semantic conventions the gateway's spans follow, pinned, and what they read from bodies.

The conventions are at Development status and change between releases, so the names live
here, in one place, pinned: by default the spans carry the names of semantic conventions
v1.36.0 (``gen_ai.system``), as the conventions ask of instrumentations while they are
experimental; with ``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental`` they carry
the latest names this module knows, those of v1.44.0 (``gen_ai.provider.name``,
``gen_ai.usage.cache_read.input_tokens``) and no old ones.

Only counts, names and parameters are read from a body: never a prompt, a message, a
completion or a tool's arguments (``gen_ai.input.messages`` and the like are opt-in in the
conventions; the gateway does not emit them at all).
"""

from __future__ import annotations

from typing import Any

import orjson

LEGACY_SCHEMA = "https://opentelemetry.io/schemas/1.36.0"
LATEST_SCHEMA = "https://opentelemetry.io/schemas/1.44.0"
OPT_IN = "gen_ai_latest_experimental"
PROVIDER = "vllm"  # vLLM is not in the conventions' list of well-known providers: its own name

# The engine path a request is relayed to -> gen_ai.operation.name.
OPERATIONS = {
    "/v1/chat/completions": "chat",
    "/v1/messages": "chat",
    "/v1/responses": "chat",
    "/v1/completions": "text_completion",
    "/v1/embeddings": "embeddings",
}

# Request parameters -> attributes (numbers only; a stop sequence could be personal text). Each
# attribute has one type, as the conventions give it (a collector keeps an attribute's values
# of one type): these are doubles whatever the JSON number (``"temperature": 0``), the rest ints.
DOUBLES = frozenset({"gen_ai.request.temperature", "gen_ai.request.top_p", "gen_ai.request.top_k",
                     "gen_ai.request.frequency_penalty", "gen_ai.request.presence_penalty"})
REQUEST_PARAMETERS = (
    ("max_tokens", "gen_ai.request.max_tokens"),
    ("max_completion_tokens", "gen_ai.request.max_tokens"),
    ("max_output_tokens", "gen_ai.request.max_tokens"),
    ("temperature", "gen_ai.request.temperature"),
    ("top_p", "gen_ai.request.top_p"),
    ("top_k", "gen_ai.request.top_k"),
    ("frequency_penalty", "gen_ai.request.frequency_penalty"),
    ("presence_penalty", "gen_ai.request.presence_penalty"),
    ("seed", "gen_ai.request.seed"),
    ("n", "gen_ai.request.choice.count"),
)


class Conventions:
    """Which version's names to write (``OTEL_SEMCONV_STABILITY_OPT_IN``)."""

    def __init__(self, opt_in: list[str] | tuple[str, ...] = ()) -> None:
        self.latest = OPT_IN in opt_in
        self.schema_url = LATEST_SCHEMA if self.latest else LEGACY_SCHEMA
        self.provider_key = "gen_ai.provider.name" if self.latest else "gen_ai.system"
        self._bases: dict[tuple[str, str | None], dict[str, Any]] = {}

    def base(self, operation: str, model: str | None) -> dict[str, Any]:
        """The operation, the provider and the model asked: one dict kept per pair, to copy, never to change."""
        attributes = self._bases.get((operation, model))
        if attributes is None:
            if len(self._bases) >= 1024:  # (models are the fleet's few; a bound all the same)
                self._bases.clear()
            attributes = self._bases[(operation, model)] = {"gen_ai.operation.name": operation,
                                                            self.provider_key: PROVIDER}
            if model:
                attributes["gen_ai.request.model"] = model
        return attributes

    def usage(self, usage: dict | None) -> dict[str, Any]:
        """OpenAI's or Anthropic's usage object -> gen_ai.usage.* (counts only)."""
        if not isinstance(usage, dict):
            return {}
        attributes: dict[str, Any] = {}
        input_tokens = usage.get("prompt_tokens")  # (OpenAI's names, as vLLM answers: read without _count)
        if type(input_tokens) is not int:
            input_tokens = _count(usage, "prompt_tokens", "input_tokens")
        output_tokens = usage.get("completion_tokens")
        if type(output_tokens) is not int:
            output_tokens = _count(usage, "completion_tokens", "output_tokens")
        if input_tokens is not None:
            attributes["gen_ai.usage.input_tokens"] = input_tokens
        if output_tokens is not None:
            attributes["gen_ai.usage.output_tokens"] = output_tokens
        cached = _cached(usage)
        if cached is not None:
            key = "gen_ai.usage.cache_read.input_tokens" if self.latest else "gen_ai.usage.input_tokens.cached"
            attributes[key] = cached
        return attributes


def operation_of(path: str) -> str | None:
    """The GenAI operation an engine path performs (None: not a GenAI call, e.g. /tokenize)."""
    return OPERATIONS.get(path)


def json_object(body: bytes | None) -> dict | None:
    """The request body's JSON object (None: not one). Decoded once per traced request: a long
    conversation's body takes tens of microseconds to decode (50 KB: about 50 us)."""
    if not body or body[:1] != b"{":
        return None
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def request_attributes(data: dict | None) -> dict[str, Any]:
    """The request's parameters (its decoded body) as attributes: numbers and flags, never text."""
    if data is None:
        return {}
    attributes: dict[str, Any] = {}
    present = _PARAMETER_FIELDS.intersection(data)  # (a body has a few of them: no get for each of the ten)
    if present:
        for field in sorted(present, key=_PARAMETER_ORDER.__getitem__) if len(present) > 1 else present:
            value = data[field]
            key = _PARAMETER_KEYS[field]
            if key in attributes or isinstance(value, bool):
                continue
            if key in DOUBLES:
                if isinstance(value, (int, float)):
                    attributes[key] = float(value)
            elif isinstance(value, int):  # (a count given as 4.0 is not recorded as a double)
                attributes[key] = value
    stream = data.get("stream")
    if stream is True or stream is False:
        attributes["gen_ai.request.stream"] = stream  # (not in the conventions: the gateway's own)
    return attributes


_PARAMETER_FIELDS = frozenset(field for field, _ in REQUEST_PARAMETERS)
_PARAMETER_ORDER = {field: index for index, (field, _) in enumerate(REQUEST_PARAMETERS)}  # the first one wins
_PARAMETER_KEYS = dict(REQUEST_PARAMETERS)


def response_attributes(conventions: Conventions, answer: bytes) -> dict[str, Any]:
    """A non-streamed answer's model, id, finish reasons and usage (counts and names only)."""
    try:
        data = orjson.loads(answer)
    except orjson.JSONDecodeError:
        return {}
    if not isinstance(data, dict):
        return {}
    attributes = conventions.usage(data.get("usage"))
    model = data.get("model")
    if isinstance(model, str):
        attributes["gen_ai.response.model"] = model
    answer_id = data.get("id")
    if isinstance(answer_id, str):
        attributes["gen_ai.response.id"] = answer_id
    reasons = finish_reasons(data)
    if reasons:
        attributes["gen_ai.response.finish_reasons"] = tuple(reasons)  # (as the SDK keeps a sequence)
    return attributes


def finish_reasons(data: dict) -> list[str]:
    reasons = []
    choices = data.get("choices")
    if type(choices) is list and len(choices) == 1:  # (the common answer: one choice, no list comprehension)
        choice = choices[0]
        reason = choice.get("finish_reason") if isinstance(choice, dict) else None
        return [reason] if isinstance(reason, str) else []
    if isinstance(choices, list):
        reasons = [choice["finish_reason"] for choice in choices
                   if isinstance(choice, dict) and isinstance(choice.get("finish_reason"), str)]
    elif isinstance(data.get("stop_reason"), str):  # Anthropic
        reasons = [data["stop_reason"]]
    elif isinstance(data.get("status"), str) and data.get("object") == "response":  # Responses
        reasons = [data["status"]]
    return reasons


def _count(usage: dict, *names: str) -> int | None:
    for name in names:
        value = usage.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _cached(usage: dict) -> int | None:
    details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details")
    if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
        return details["cached_tokens"]
    value = usage.get("cache_read_input_tokens")  # Anthropic
    return value if isinstance(value, int) and not isinstance(value, bool) else None
