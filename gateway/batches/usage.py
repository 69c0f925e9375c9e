"""A line's usage, read once from its answer in any of the four shapes, and where it is counted.

The endpoints name their tokens differently: chat and completions ``prompt_tokens`` /
``completion_tokens`` (with ``*_details``), Responses ``input_tokens`` / ``output_tokens``
(with ``*_details``), Anthropic ``input_tokens`` / ``output_tokens`` and
``cache_read_input_tokens``, embeddings ``prompt_tokens`` alone. ``LineUsage`` is the one
reading; the batch's own counters (``request_counts``' neighbour ``usage``), the per-key
Prometheus counters and the usage ledger all take it from here.

A batch line is billed to the key that created the batch (its owner), on the ledger's
``route`` ``batch:<endpoint>`` (so reports and prices tell batch work from live traffic),
under the model name the line asked for, as live requests are counted as the client asked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

BATCH_ROUTE_PREFIX = "batch:"


@dataclass(frozen=True, slots=True)
class LineUsage:
    prompt: int = 0
    completion: int = 0
    cached: int = 0
    reasoning: int = 0

    @property
    def total(self) -> int:
        return self.prompt + self.completion


def _int(mapping: object, *names: str) -> int:
    if not isinstance(mapping, dict):
        return 0
    for name in names:
        value = mapping.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return 0


def usage_of(body: object) -> LineUsage:
    """The usage an answer reports (zeros when it reports none)."""
    usage = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(usage, dict):
        return LineUsage()
    details_in = usage.get("prompt_tokens_details") or usage.get("input_tokens_details")
    details_out = usage.get("completion_tokens_details") or usage.get("output_tokens_details")
    return LineUsage(prompt=_int(usage, "prompt_tokens", "input_tokens"),
                     completion=_int(usage, "completion_tokens", "output_tokens"),
                     cached=_int(details_in, "cached_tokens") or _int(usage, "cache_read_input_tokens"),
                     reasoning=_int(details_out, "reasoning_tokens"))


class UsageRecorder(Protocol):
    """``UsageLedger.record``'s signature (``gateway.tenancy``): never blocks, never raises for the database."""

    def __call__(self, *, key_id: str, model: str, route: str, prompt_tokens: int = 0, completion_tokens: int = 0,
                 cached_tokens: int = 0, reasoning_tokens: int = 0) -> None: ...


def batch_route(endpoint: str) -> str:
    return BATCH_ROUTE_PREFIX + endpoint
