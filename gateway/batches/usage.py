"""A line's usage, read once from its answer in any of the four shapes, and where it is counted.

The endpoints name their tokens differently: chat and completions ``prompt_tokens`` /
``completion_tokens`` (with ``*_details``), Responses ``input_tokens`` / ``output_tokens``
(with ``*_details``), Anthropic ``input_tokens`` / ``output_tokens`` and
``cache_read_input_tokens``, embeddings ``prompt_tokens`` alone. A line's answer is read by the
one reading of a live request's usage (``tenancy.usage.counts``: cached tokens inside the prompt,
Anthropic's cache reads added to its ``input_tokens``); the batch's own counters
(``request_counts``' neighbour ``usage``), the per-key Prometheus counters and the usage ledger
all take it from here.

A batch line is billed to the key that created the batch (its owner), on the ledger's
``route`` ``batch:<endpoint>`` (so reports and prices tell batch work from live traffic),
under the model name the line asked for, as live requests are counted as the client asked.
"""

from __future__ import annotations

from typing import Protocol

from gateway.tenancy.usage.counts import TokenCounts, counts_of

BATCH_ROUTE_PREFIX = "batch:"


def usage_of(body: object) -> TokenCounts:
    """The usage an answer reports, counted as a live request's is (zeros when it reports none)."""
    return counts_of(body.get("usage") if isinstance(body, dict) else None)


class UsageRecorder(Protocol):
    """``UsageLedger.record``'s signature (``gateway.tenancy``): never blocks, never raises for the database."""

    def __call__(self, *, key_id: str, model: str, route: str, prompt_tokens: int = 0, completion_tokens: int = 0,
                 cached_tokens: int = 0, reasoning_tokens: int = 0) -> None: ...


def batch_route(endpoint: str) -> str:
    return BATCH_ROUTE_PREFIX + endpoint
