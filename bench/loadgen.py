"""Closed-loop async load generator for OpenAI-compatible completion routes.

C workers each send requests back to back for a fixed duration (after a warm-up whose
requests are not counted); every request's end-to-end latency, time to first content chunk
and content-chunk count are recorded. Kept cheap on purpose (it shares a core with the fake
upstream): one aiohttp session, pre-encoded request bodies, SSE counted by byte-splitting.

    python -m bench.loadgen --url http://127.0.0.1:9000 --stream --max-tokens 256 -c 32 -d 5
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter
from dataclasses import asdict, dataclass

import aiohttp
import orjson

from bench.sse import SseCounter
from bench.stats import percentile

PROMPT = "Write a short note about benchmarks."
MIN_REQUESTS_PER_WORKER = 5  # a measured window lasts at least this many typical requests
MAX_DURATION_S = 30.0


@dataclass(frozen=True)
class Scenario:
    """What one measurement sends: a mode (stream or not), a size and a concurrency."""

    stream: bool
    max_tokens: int
    concurrency: int
    path: str = "/v1/chat/completions"
    # A real engine may merge or split tokens into chunks: then only count them.
    exact_chunks: bool = True
    extra_body: tuple[tuple[str, object], ...] = ()  # e.g. (("ignore_eos", True),)

    @property
    def mode(self) -> str:
        return "stream" if self.stream else "nonstream"

    @property
    def key(self) -> str:
        return f"{self.mode}-c{self.concurrency}"


@dataclass
class LoadResult:
    """The summary of one measured run (latencies in milliseconds)."""

    requests: int
    errors: int
    error_kinds: dict
    elapsed_s: float
    rps: float
    latency_p50_ms: float
    latency_p90_ms: float
    latency_p99_ms: float
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    chunks: int
    chunks_per_s: float
    chunks_per_stream_min: int | None
    chunks_per_stream_max: int | None

    def to_dict(self) -> dict:
        return asdict(self)


def request_body(*, model: str, scenario: Scenario) -> bytes:
    """The JSON body every request of a scenario sends (encoded once)."""
    if scenario.path.endswith("/chat/completions"):
        payload: dict = {"model": model, "messages": [{"role": "user", "content": PROMPT}]}
    else:
        payload = {"model": model, "prompt": PROMPT}
    payload |= {"max_tokens": scenario.max_tokens, "temperature": 0, "stream": scenario.stream,
                **dict(scenario.extra_body)}
    return orjson.dumps(payload)


class _Recorder:
    __slots__ = ("latencies", "ttfts", "chunk_counts", "errors", "expected_chunks")

    def __init__(self, expected_chunks: int | None) -> None:
        self.latencies: list[float] = []
        self.ttfts: list[float] = []
        self.chunk_counts: list[int] = []
        self.errors: Counter[str] = Counter()
        self.expected_chunks = expected_chunks


async def _one_request(session: aiohttp.ClientSession, url: str, body: bytes,
                       stream: bool, record: _Recorder) -> None:
    started = time.perf_counter()
    first_chunk_at = None
    try:
        async with session.post(url, data=body) as response:
            if response.status != 200:
                await response.read()
                record.errors[f"http_{response.status}"] += 1
                return
            if not stream:
                payload = await response.read()
                if b'"choices"' not in payload:
                    record.errors["no_choices"] += 1
                    return
            else:
                counter = SseCounter()
                async for data in response.content.iter_any():
                    if counter.feed(data) and first_chunk_at is None:
                        first_chunk_at = time.perf_counter()
                if not counter.done or counter.error_events:
                    record.errors["stream_error" if counter.error_events else "no_done"] += 1
                    return
                if record.expected_chunks and counter.content_events != record.expected_chunks:
                    record.errors["chunk_count"] += 1
                    return
                record.chunk_counts.append(counter.content_events)
                if first_chunk_at is not None:
                    record.ttfts.append(first_chunk_at - started)
    except (TimeoutError, aiohttp.ClientError, OSError) as error:
        record.errors[type(error).__name__] += 1
        return
    record.latencies.append(time.perf_counter() - started)


async def _closed_loop(session: aiohttp.ClientSession, url: str, body: bytes, stream: bool,
                       concurrency: int, duration: float, record: _Recorder) -> float:
    deadline = time.perf_counter() + duration

    async def worker() -> None:
        while time.perf_counter() < deadline:
            await _one_request(session, url, body, stream, record)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started


def new_session(concurrency: int, *, headers: dict | None = None,
                timeout_s: float = 300.0) -> aiohttp.ClientSession:
    """A client session sized for ``concurrency`` keep-alive connections."""
    connector = aiohttp.TCPConnector(limit=concurrency + 8, keepalive_timeout=120,
                                     enable_cleanup_closed=False)
    return aiohttp.ClientSession(
        connector=connector, auto_decompress=False, raise_for_status=False,
        headers={"content-type": "application/json", **(headers or {})},
        timeout=aiohttp.ClientTimeout(total=timeout_s, sock_connect=10),
    )


async def run_load(*, base_url: str, model: str, scenario: Scenario, duration: float,
                   warmup: float = 0.5, headers: dict | None = None,
                   before_measuring=None) -> LoadResult:
    """Warm up, then measure ``scenario`` against ``base_url`` for ``duration`` seconds.

    ``before_measuring`` (an async callable) runs between warm-up and measurement.
    """
    url = base_url.rstrip("/") + scenario.path
    body = request_body(model=model, scenario=scenario)
    expected = scenario.max_tokens if scenario.stream and scenario.exact_chunks else None
    async with new_session(scenario.concurrency, headers=headers) as session:
        if warmup > 0:
            warm = _Recorder(expected)
            await _closed_loop(session, url, body, scenario.stream, scenario.concurrency,
                               warmup, warm)
            # Long requests (e.g. 256 streams of 256 chunks) need a longer window, or the
            # figures depend on how the last few requests straddle its end.
            typical = percentile(warm.latencies, 50)
            duration = min(max(duration, MIN_REQUESTS_PER_WORKER * typical), MAX_DURATION_S)
        if before_measuring is not None:
            await before_measuring()
        record = _Recorder(expected)
        elapsed = await _closed_loop(session, url, body, scenario.stream,
                                     scenario.concurrency, duration, record)
    return summarise(record, elapsed)


def summarise(record: _Recorder, elapsed: float) -> LoadResult:
    """Turn raw samples into the reported figures."""
    ms = [x * 1000 for x in record.latencies]
    ttft = [x * 1000 for x in record.ttfts]
    chunks = sum(record.chunk_counts)
    return LoadResult(
        requests=len(ms),
        errors=sum(record.errors.values()),
        error_kinds=dict(record.errors),
        elapsed_s=elapsed,
        rps=len(ms) / elapsed if elapsed else 0.0,
        latency_p50_ms=percentile(ms, 50),
        latency_p90_ms=percentile(ms, 90),
        latency_p99_ms=percentile(ms, 99),
        ttft_p50_ms=percentile(ttft, 50) if ttft else None,
        ttft_p99_ms=percentile(ttft, 99) if ttft else None,
        chunks=chunks,
        chunks_per_s=chunks / elapsed if elapsed else 0.0,
        chunks_per_stream_min=min(record.chunk_counts) if record.chunk_counts else None,
        chunks_per_stream_max=max(record.chunk_counts) if record.chunk_counts else None,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Closed-loop load against one base URL.")
    parser.add_argument("--url", required=True, help="base URL, e.g. http://127.0.0.1:9000")
    parser.add_argument("--model", default="fake-model")
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("-c", "--concurrency", type=int, default=1)
    parser.add_argument("-d", "--duration", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=0.5)
    parser.add_argument("--path", default="/v1/chat/completions")
    args = parser.parse_args(argv)
    scenario = Scenario(stream=args.stream, max_tokens=args.max_tokens,
                        concurrency=args.concurrency, path=args.path)

    import uvloop

    result = uvloop.run(run_load(base_url=args.url, model=args.model, scenario=scenario,
                                 duration=args.duration, warmup=args.warmup))
    print(orjson.dumps(result.to_dict(), option=orjson.OPT_INDENT_2).decode())


if __name__ == "__main__":
    main()
