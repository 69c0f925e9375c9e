"""Consistent hashing with bounded loads, the same on every gateway replica.

Rendezvous (highest-random-weight) hashing: a key's engines are ranked by a hash of (key,
engine id), so every replica that sees the same engines ranks them the same way, whatever
order it learnt them in, with no shared state; an engine that leaves moves only its own
keys. The bound (Mirrokni, Thorup and Zadimoghaddam, "Consistent Hashing with Bounded
Loads"): the first engine in the key's ranking whose load, with this request, stays within
``bound x (total load + 1) / engines`` (rounded up) takes it; so an affinity holds while its
engine is not much busier than the fleet's mean, and a hot key spills to its next engine
instead of piling up on one.

The key's hash is CRC-32 (deterministic, and the cheapest hash of a long prompt prefix in
the standard library); each engine's weight mixes it with the engine's own 64-bit hash
(SplitMix64's finaliser), a few integer operations per engine.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence

from gateway.engines.engine import Engine

MASK = (1 << 64) - 1


def key_hash(key: str | bytes) -> int:
    return zlib.crc32(key.encode() if isinstance(key, str) else key)


def weight(key: int, engine_hash: int) -> int:
    z = ((key ^ engine_hash) + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def top(key: int, engines: Sequence[Engine]) -> Engine:
    """The engine ``key`` prefers among ``engines`` (ignoring load)."""
    return max(engines, key=lambda engine: weight(key, engine.hash))


def bounded_choice(key: int, engines: Sequence[Engine], bound: float) -> tuple[Engine, bool]:
    """The engine for ``key`` under the load bound, and whether it is not the key's first choice."""
    if len(engines) == 1:
        return engines[0], False
    scores = [engine.score() for engine in engines]
    limit = math.ceil(bound * (sum(scores) + 1) / len(engines))
    ranked = sorted(range(len(engines)), key=lambda i: weight(key, engines[i].hash), reverse=True)
    for place, i in enumerate(ranked):
        if scores[i] + 1 <= limit:
            return engines[i], place > 0
    lightest = min(range(len(engines)), key=scores.__getitem__)  # every engine is over: the least loaded
    return engines[lightest], lightest != ranked[0]
