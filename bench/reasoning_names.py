"""What naming a chat answer's reasoning both ways costs a stream (``gateway.protocols.openai.reasoning``).

    python -m bench.reasoning_names [--rounds 6]

In process, on vLLM-shaped chunks (one event per engine read, as vLLM writes them), alternating
rounds of the OpenAI tracker's ``accept`` with the step and without it (the step taken out of a
copy of the tracker): a stream of plain content, where the step is one byte search per read,
and a stream of reasoning deltas (``reasoning`` only, as current vLLM sends them), where every
event is decoded and written again. Figures: microseconds per event, median of the rounds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import orjson

from gateway.protocols.openai import dialect
from gateway.protocols.openai.dialect import OpenAITracker

RESULTS = Path(__file__).resolve().parent / "results"
EVENTS = 2_000


def chunk(delta: dict) -> bytes:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
    return b"data: " + orjson.dumps({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1,
                                     "model": "qwen3-embedded", "choices": [choice]}) + b"\n\n"


class WithoutStep:
    """The tracker's module with the reasoning step made a no-op (``MARK`` never found)."""

    MARK = b"\x00never\x00"


def per_event_us(blocks: list[bytes], *, step: bool) -> float:
    saved = dialect.reasoning
    if not step:
        dialect.reasoning = WithoutStep
    try:
        tracker = OpenAITracker(relay_usage=False, collect_text=False)
        started = time.perf_counter()
        for block in blocks:
            tracker.accept(block)
        return (time.perf_counter() - started) / len(blocks) * 1e6
    finally:
        dialect.reasoning = saved


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    streams = {"content": [chunk({"content": " word"}) for _ in range(EVENTS)],
               "reasoning": [chunk({"reasoning": " thought"}) for _ in range(EVENTS)]}
    figures: dict[str, dict[str, list[float]]] = {name: {"with": [], "without": []} for name in streams}
    for _ in range(args.rounds):
        for name, blocks in streams.items():
            figures[name]["without"].append(per_event_us(blocks, step=False))
            figures[name]["with"].append(per_event_us(blocks, step=True))
    report = {name: {side: round(statistics.median(values), 3) for side, values in sides.items()}
              for name, sides in figures.items()}
    for sides in report.values():
        sides["added_us_per_event"] = round(sides["with"] - sides["without"], 3)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "reasoning_names.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
