"""How many requests a vLLM engine finished, from its Prometheus metrics.

The real engine may be shared (other people's tests, other clients). Counting the requests
it finished during a measured window, minus the benchmark's own, shows whether somebody
else was using it then, which explains a disturbed end-to-end round.
"""

from __future__ import annotations

import aiohttp

METRIC = b"vllm:request_success_total"


def parse_finished(metrics: bytes) -> float:
    """Sum of ``vllm:request_success_total`` over all its label sets."""
    total = 0.0
    for line in metrics.splitlines():
        if line.startswith(METRIC):
            total += float(line.rsplit(b" ", 1)[1])
    return total


class EngineCounter:
    """An async callable: the engine's finished-request count right now (None if unknown)."""

    def __init__(self, engine_url: str) -> None:
        self.url = engine_url.rstrip("/") + "/metrics"

    async def __call__(self) -> float | None:
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
                async with session.get(self.url) as response:
                    if response.status != 200:
                        return None
                    return parse_finished(await response.read())
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
            return None
