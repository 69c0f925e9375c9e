"""What fitting an output limit costs a request (``gateway.protocols.common.budget``).

    python -m bench.output_limits --engine-url URL [--engine-key KEY] --messages-body FILE [--rounds 10]

Two figures, in one run:

- the fast path, when the limit obviously fits: ``fit_output_limit`` on a small chat request
  (the check the gateway makes on every request that names a limit), timed in process;
- the count, when it might not fit: the engine's ``/v1/messages/count_tokens`` for a real Claude
  Code request (``--messages-body``, ~78 KB), against the same request's own time to its first
  streamed event (what the client waits for anyway), alternating, median of ``--rounds``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

import aiohttp

from gateway.protocols.common.budget import Measured, fit_output_limit

RESULTS = Path(__file__).resolve().parent / "results"


def fast_path_seconds(iterations: int = 200_000) -> float:
    payload = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 256}

    async def never() -> Measured:
        raise AssertionError("the fast path never counts")

    async def loop() -> float:
        started = time.perf_counter()
        for _ in range(iterations):
            await fit_output_limit(payload, body_bytes=120, fields=("max_completion_tokens", "max_tokens"),
                                   prompt_field="messages", context=65536, measure=never)
        return (time.perf_counter() - started) / iterations

    return asyncio.run(loop())


async def counted(args) -> dict:
    headers = {"Authorization": f"Bearer {args.engine_key}"} if args.engine_key else {}
    body = json.loads(Path(args.messages_body).read_text())
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        async with session.get(f"{args.engine_url}/v1/models", headers=headers) as response:
            model = (await response.json())["data"][0]["id"]
        body.update(model=model, max_tokens=256, stream=True)
        count_body = {k: v for k, v in body.items() if k not in ("max_tokens", "stream")}
        counts, firsts = [], []
        for round_ in range(args.rounds):
            async def count() -> None:
                started = time.perf_counter()
                async with session.post(f"{args.engine_url}/v1/messages/count_tokens", json=count_body,
                                        headers=headers) as response:
                    await response.read()
                counts.append(time.perf_counter() - started)

            async def first_event() -> None:
                started = time.perf_counter()
                async with session.post(f"{args.engine_url}/v1/messages", json=body, headers=headers) as response:
                    async for _ in response.content:
                        firsts.append(time.perf_counter() - started)
                        break
                # the rest of the answer is read off the clock
            for step in ((count, first_event) if round_ % 2 == 0 else (first_event, count)):
                await step()
    return {"count_ms": round(statistics.median(counts) * 1000, 1),
            "first_event_ms": round(statistics.median(firsts) * 1000, 1), "rounds": args.rounds,
            "body_bytes": len(json.dumps(body))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine-url", required=True)
    parser.add_argument("--engine-key")
    parser.add_argument("--messages-body", required=True)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    report = {"fast_path_us": round(fast_path_seconds() * 1e6, 3)}
    print("fast path", report, flush=True)
    report |= asyncio.run(counted(args))
    print(report)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "output_limits.json").write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
