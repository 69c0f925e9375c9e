"""One request's tokens from whichever ``usage`` object its protocol answered with.

OpenAI Chat/Completions and embeddings (``prompt_tokens``, ``completion_tokens``,
``prompt_tokens_details.cached_tokens``, ``completion_tokens_details.reasoning_tokens``),
Responses (``input_tokens``, ``output_tokens``, ``input_tokens_details.cached_tokens``,
``output_tokens_details.reasoning_tokens``) and Anthropic Messages (``input_tokens`` not
counting ``cache_read_input_tokens`` and ``cache_creation_input_tokens``, ``output_tokens``).
Prompt tokens here include the cached ones (the ledger reports them apart and prices them
apart); reasoning tokens are part of the completion, as OpenAI counts them. Getting this
right is what LiteLLM's 20-60 % under-reporting under caching and reasoning got wrong.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TokenCounts:
    prompt: int = 0
    completion: int = 0
    cached: int = 0
    reasoning: int = 0

    @property
    def total(self) -> int:
        return self.prompt + self.completion


NO_TOKENS = TokenCounts()


def counts_of(usage: object) -> TokenCounts:
    """The counts of a ``usage`` object of any protocol (nothing usable: zeros)."""
    if not isinstance(usage, dict):
        return NO_TOKENS
    if "prompt_tokens" in usage or "completion_tokens" in usage:
        prompt = _int(usage.get("prompt_tokens"))
        completion = _int(usage.get("completion_tokens"))
        cached = _int(_detail(usage, "prompt_tokens_details", "cached_tokens"))
        reasoning = _int(_detail(usage, "completion_tokens_details", "reasoning_tokens"))
        return TokenCounts(prompt, completion, min(cached, prompt), min(reasoning, completion))
    if "cache_read_input_tokens" in usage or "cache_creation_input_tokens" in usage:
        # Anthropic: input_tokens excludes what was read from or written to the cache.
        read = _int(usage.get("cache_read_input_tokens"))
        prompt = _int(usage.get("input_tokens")) + read + _int(usage.get("cache_creation_input_tokens"))
        return TokenCounts(prompt, _int(usage.get("output_tokens")), read, 0)
    prompt = _int(usage.get("input_tokens"))
    completion = _int(usage.get("output_tokens"))
    cached = _int(_detail(usage, "input_tokens_details", "cached_tokens"))
    reasoning = _int(_detail(usage, "output_tokens_details", "reasoning_tokens"))
    return TokenCounts(prompt, completion, min(cached, prompt), min(reasoning, completion))


def _detail(usage: dict, group: str, name: str) -> object:
    details = usage.get(group)
    return details.get(name) if isinstance(details, dict) else None


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
