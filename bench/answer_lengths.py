"""How long the embedded model's answers run, greedy and sampled: the end-of-turn shaping measured.

    python -m bench.answer_lengths --engine-url URL [--engine-key KEY] [--prompts 24] [--max-tokens 1024]

Sends each of ``--prompts`` short chat prompts twice to a running engine (vLLM on the embedded
model): once greedy (``temperature: 0``, the deterministic tests' setting) and once sampled with
the engine's defaults (no sampling field: what Claude Code and Codex send), both without
``ignore_eos`` and with ``--max-tokens`` as the limit. Reports, per mode, how many answers ended
on their own (``finish_reason: stop``) and the quartiles of their lengths; then, if given,
the same for ``--long-prompt-file`` (a Messages request body, e.g. one Claude Code sent, sent
``--long-rounds`` times sampled). Results to stdout and bench/results/answer_lengths.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

import aiohttp

RESULTS = Path(__file__).resolve().parent / "results"
TOPICS = ["a lighthouse", "the sea", "Python", "recursion", "a garden", "the moon", "trains", "coffee",
          "a library", "mountains", "rain", "a compiler", "bees", "chess", "bread", "a bridge",
          "winter", "a river", "clocks", "maps", "glass", "music", "salt", "stars", "paper", "ice",
          "wind", "a market", "owls", "sand", "a violin", "copper"]


def prompts(count: int) -> list[str]:
    forms = ["Tell me about {}.", "say hi about {}", "Write a function about {}.", "Explain {} briefly."]
    return [forms[i % len(forms)].format(TOPICS[i % len(TOPICS)]) for i in range(count)]


async def chat(session, url, headers, model, prompt, max_tokens, greedy) -> tuple[str, int]:
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens}
    if greedy:
        body["temperature"] = 0
    async with session.post(f"{url}/v1/chat/completions", json=body, headers=headers) as response:
        answer = await response.json()
    return answer["choices"][0]["finish_reason"], answer["usage"]["completion_tokens"]


async def message(session, url, headers, body) -> tuple[str, int, int]:
    async with session.post(f"{url}/v1/messages", json=body, headers=headers) as response:
        answer = await response.json()
    return answer["stop_reason"], answer["usage"]["output_tokens"], answer["usage"]["input_tokens"]


def summary(results: list[tuple[str, int]], ended: str) -> dict:
    lengths = sorted(n for _, n in results)
    quartiles = statistics.quantiles(lengths, n=4) if len(lengths) > 1 else lengths * 3
    return {"answers": len(results), "ended_on_their_own": sum(1 for reason, _ in results if reason == ended),
            "min": lengths[0], "q1": quartiles[0], "median": quartiles[1], "q3": quartiles[2], "max": lengths[-1]}


async def run(args) -> dict:
    headers = {"Authorization": f"Bearer {args.engine_key}"} if args.engine_key else {}
    timeout = aiohttp.ClientTimeout(total=1800)
    report: dict = {"max_tokens": args.max_tokens}
    async with aiohttp.ClientSession(timeout=timeout) as session:
        async with session.get(f"{args.engine_url}/v1/models", headers=headers) as response:
            model = (await response.json())["data"][0]["id"]
        for mode, greedy in (("greedy", True), ("sampled", False)):
            semaphore = asyncio.Semaphore(args.concurrency)

            async def one(prompt, greedy=greedy, semaphore=semaphore):
                async with semaphore:
                    return await chat(session, args.engine_url, headers, model, prompt, args.max_tokens, greedy)

            started = time.monotonic()
            results = await asyncio.gather(*(one(p) for p in prompts(args.prompts)))
            report[mode] = summary(results, "stop") | {"seconds": round(time.monotonic() - started, 1)}
            print(mode, report[mode], flush=True)
        if args.long_prompt_file:
            body = json.loads(Path(args.long_prompt_file).read_text())
            body = {key: value for key, value in body.items() if key not in ("stream", "thinking")}
            body.update(model=model, max_tokens=args.max_tokens)
            results, input_tokens = [], 0
            started = time.monotonic()
            for _ in range(args.long_rounds):
                reason, output_tokens, input_tokens = await message(session, args.engine_url, headers, body)
                results.append((reason, output_tokens))
            report["long_prompt_sampled"] = summary(results, "end_turn") | {
                "input_tokens": input_tokens, "seconds": round(time.monotonic() - started, 1)}
            print("long prompt, sampled", report["long_prompt_sampled"], flush=True)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine-url", required=True)
    parser.add_argument("--engine-key")
    parser.add_argument("--prompts", type=int, default=24)
    parser.add_argument("--max-tokens", type=int, default=1024)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--long-prompt-file")
    parser.add_argument("--long-rounds", type=int, default=4)
    args = parser.parse_args()
    report = asyncio.run(run(args))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "answer_lengths.json").write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
