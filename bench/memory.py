"""Resident memory of a server holding many concurrent open streams.

The fake upstream behind it sends one frame every ``chunk_delay`` seconds, so every stream
stays open; once all of them have delivered their first content chunk, the server's RSS is
sampled a few times (the maximum is kept). Then every stream is read to its end and checked.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp

from bench.loadgen import Scenario, new_session, request_body
from bench.procs import ServerProcess
from bench.sse import SseCounter


class _OpenStreams:
    """How many streams are open right now (first content chunk seen, end not yet)."""

    def __init__(self, wanted: int) -> None:
        self.now = 0
        self.wanted = wanted
        self.all_open = asyncio.Event()

    def opened(self) -> None:
        self.now += 1
        if self.now == self.wanted:
            self.all_open.set()

    def closed(self) -> None:
        self.now -= 1


async def _hold_stream(session: aiohttp.ClientSession, url: str, body: bytes, tokens: int,
                       open_streams: _OpenStreams, errors: dict[str, int]) -> None:
    counter = SseCounter()
    announced = False
    try:
        async with session.post(url, data=body) as response:
            if response.status != 200:
                await response.read()
                errors[f"http_{response.status}"] = errors.get(f"http_{response.status}", 0) + 1
                return
            async for data in response.content.iter_any():
                if counter.feed(data) and not announced:
                    announced = True
                    open_streams.opened()
    except (TimeoutError, aiohttp.ClientError, OSError) as error:
        kind = type(error).__name__
        errors[kind] = errors.get(kind, 0) + 1
        return
    finally:
        if announced:
            open_streams.closed()
    if not counter.done or counter.error_events or counter.content_events != tokens:
        errors["incomplete_stream"] = errors.get("incomplete_stream", 0) + 1


async def measure_open_streams(*, server: ServerProcess, model: str, streams: int, tokens: int,
                               open_timeout: float, samples: int = 5,
                               headers: dict | None = None) -> dict:
    """Open ``streams`` streams through ``server`` at once; RSS before, while open, after."""
    scenario = Scenario(stream=True, max_tokens=tokens, concurrency=streams)
    body = request_body(model=model, scenario=scenario)
    url = server.base_url + scenario.path
    rss_before = await server.rss_bytes()
    open_streams, errors = _OpenStreams(streams), {}
    started = time.perf_counter()
    async with new_session(streams, headers=headers, timeout_s=open_timeout + 600) as session:
        tasks = [asyncio.create_task(_hold_stream(session, url, body, tokens, open_streams,
                                                  errors)) for _ in range(streams)]
        try:
            await asyncio.wait_for(open_streams.all_open.wait(), open_timeout)
        except TimeoutError:
            pass
        open_after_s = time.perf_counter() - started
        samples_taken = []  # (rss, streams open at that moment)
        for _ in range(samples):
            samples_taken.append((await server.rss_bytes(), open_streams.now))
            await asyncio.sleep(0.2)
        await asyncio.gather(*tasks)
    rss_during, open_at_peak = max(samples_taken)
    rss_after = await server.rss_bytes()
    delta = rss_during - rss_before
    return {
        "streams": streams,
        "tokens_per_stream": tokens,
        "open_concurrently": open_at_peak,
        "seconds_to_open_all": open_after_s if open_streams.all_open.is_set() else None,
        "errors": sum(errors.values()),
        "error_kinds": errors,
        "rss_before_bytes": rss_before,
        "rss_during_bytes": rss_during,
        "rss_after_bytes": rss_after,
        "rss_delta_bytes": delta,
        "bytes_per_stream": delta / open_at_peak if open_at_peak else None,
    }
