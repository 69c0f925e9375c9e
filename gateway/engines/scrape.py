"""An engine's load, read from its Prometheus ``/metrics`` text (no key needed, even with ``--api-key``).

vLLM 0.32 exposes ``vllm:num_requests_running`` and ``vllm:num_requests_waiting`` (gauges),
``vllm:kv_cache_usage_perc`` (a fraction 0..1, despite the name) and the prefix-cache
counters ``vllm:prefix_cache_queries_total`` / ``vllm:prefix_cache_hits_total`` (prompt
tokens, counted in whole KV blocks). Older releases named them ``vllm:gpu_cache_usage_perc``
and ``vllm:gpu_prefix_cache_{queries,hits}_total`` (V0 also had a ``vllm:gpu_prefix_cache_hit_rate``
gauge): a router that reads only one generation of names sees zeros on the other, so both are
read, the current names winning. An engine run with data parallelism reports one sample per
``engine`` label: counts are summed, the KV usage is the highest rank's.

Only lines starting with ``vllm:`` are looked at, by byte comparison (a scrape of vLLM's
~40 KB text costs well under a millisecond).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Load:
    running: float = 0.0
    waiting: float = 0.0
    kv_cache_usage: float | None = None       # 0..1
    prefix_cache_hits: float | None = None    # tokens, since the engine started
    prefix_cache_queries: float | None = None


# Wire name -> (field, generation): generation 1 (current) wins over 0 (older names).
_NAMES = {
    b"vllm:num_requests_running": ("running", 1),
    b"vllm:num_requests_waiting": ("waiting", 1),
    b"vllm:kv_cache_usage_perc": ("kv_cache_usage", 1),
    b"vllm:gpu_cache_usage_perc": ("kv_cache_usage", 0),
    b"vllm:prefix_cache_hits_total": ("prefix_cache_hits", 1),
    b"vllm:prefix_cache_queries_total": ("prefix_cache_queries", 1),
    b"vllm:gpu_prefix_cache_hits_total": ("prefix_cache_hits", 0),
    b"vllm:gpu_prefix_cache_queries_total": ("prefix_cache_queries", 0),
    b"vllm:gpu_prefix_cache_hits": ("prefix_cache_hits", 0),
    b"vllm:gpu_prefix_cache_queries": ("prefix_cache_queries", 0),
}
_HIGHEST = frozenset({"kv_cache_usage"})  # per-rank fractions: the busiest rank, not a sum


def parse_load(text: bytes) -> Load:
    """The load in a /metrics answer (missing families read as 0 or None)."""
    found: dict[str, tuple[int, float]] = {}
    for line in text.split(b"\n"):
        if not line.startswith(b"vllm:"):
            continue
        end = line.find(b"{")
        if end < 0:
            end = line.find(b" ")
        known = _NAMES.get(line[:end])
        if known is None:
            continue
        field, generation = known
        try:
            value = float(line[line.rindex(b"}") + 1:] if b"}" in line else line[end:])
        except ValueError:
            continue
        current = found.get(field)
        if current is None or generation > current[0]:
            found[field] = (generation, value)
        elif generation == current[0]:
            found[field] = (generation, max(current[1], value) if field in _HIGHEST else current[1] + value)
    load = Load()
    for field, (_, value) in found.items():
        setattr(load, field, value)
    return load
