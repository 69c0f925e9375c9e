"""CPU per Responses stream through its dialect's tracker, in one process.

A stream of 256 one-event text reads, its item's ``output_item.done`` and the terminal event, as
vLLM writes them. ``python -m bench.responses_tracker [streams]``; for a before and after, run it in
two trees (a ``git worktree`` of the older commit, ``PYTHONPATH`` set to each) one after the other.
"""

from __future__ import annotations

import json
import sys
import time

from gateway.protocols.responses.dialect import ResponsesDialect, ResponsesRun

TOKENS = 256
ROUNDS = 5


def event(name: str, payload: dict) -> bytes:
    return f"event: {name}\ndata: {json.dumps(payload, separators=(',', ':'))}\n\n".encode()


def engine_reads() -> list[bytes]:
    response = {"id": "resp_1", "object": "response", "status": "in_progress", "output": [], "model": "m"}
    reads = [event("response.created", {"type": "response.created", "response": response, "sequence_number": 0})]
    for n in range(TOKENS):
        reads.append(event("response.output_text.delta", {
            "type": "response.output_text.delta", "delta": " word", "item_id": "msg_1", "output_index": 0,
            "content_index": 0, "sequence_number": n + 1}))
    item = {"id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": " word" * TOKENS, "annotations": []}]}
    reads.append(event("response.output_item.done", {"type": "response.output_item.done", "item": item,
                                                       "output_index": 0, "sequence_number": TOKENS + 2}))
    final = dict(response, status="completed", output=[item],
                 usage={"input_tokens": 5, "output_tokens": TOKENS, "total_tokens": TOKENS + 5})
    reads.append(event("response.completed", {"type": "response.completed", "response": final,
                                              "sequence_number": TOKENS + 3}))
    return reads


def one_stream(reads: list[bytes]) -> int:
    tracker = ResponsesDialect(ResponsesRun(response_id="resp_1")).tracker(relay_usage=True, collect_text=False)
    return sum(len(tracker.accept(block)) for block in reads)


def main() -> None:
    streams = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    reads = engine_reads()
    one_stream(reads)
    per_stream = []
    for _ in range(ROUNDS):
        started = time.process_time()
        for _ in range(streams):
            one_stream(reads)
        per_stream.append((time.process_time() - started) / streams * 1e6)
    best = min(per_stream)
    print(f"{best:.1f} us per stream ({best / len(reads):.2f} us per read); rounds {[round(x, 1) for x in per_stream]}")


if __name__ == "__main__":
    main()
