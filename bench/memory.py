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


async def _hold_stream(session: aiohttp.ClientSession, url: str, body: bytes, tokens: int,
                       opened: list[int], all_open: asyncio.Event, streams: int,
                       errors: dict[str, int]) -> None:
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
                    opened[0] += 1
                    if opened[0] == streams:
                        all_open.set()
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as error:
        kind = type(error).__name__
        errors[kind] = errors.get(kind, 0) + 1
        return
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
    opened, all_open, errors = [0], asyncio.Event(), {}
    started = time.perf_counter()
    async with new_session(streams, headers=headers, timeout_s=open_timeout + 600) as session:
        tasks = [asyncio.create_task(_hold_stream(session, url, body, tokens, opened, all_open,
                                                  streams, errors)) for _ in range(streams)]
        try:
            await asyncio.wait_for(all_open.wait(), open_timeout)
        except asyncio.TimeoutError:
            pass
        open_after_s = time.perf_counter() - started
        open_streams = opened[0]
        rss_samples = []
        for _ in range(samples):
            rss_samples.append(await server.rss_bytes())
            await asyncio.sleep(0.2)
        await asyncio.gather(*tasks)
    rss_during = max(rss_samples)
    rss_after = await server.rss_bytes()
    delta = rss_during - rss_before
    return {
        "streams": streams,
        "tokens_per_stream": tokens,
        "open_concurrently": open_streams,
        "seconds_to_open_all": open_after_s if open_streams == streams else None,
        "errors": sum(errors.values()),
        "error_kinds": errors,
        "rss_before_bytes": rss_before,
        "rss_during_bytes": rss_during,
        "rss_after_bytes": rss_after,
        "rss_delta_bytes": delta,
        "bytes_per_stream": delta / open_streams if open_streams else None,
    }
