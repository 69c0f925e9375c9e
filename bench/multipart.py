"""What reading the ``model`` of an audio upload costs: the regex it replaced against python-multipart.

    python -m bench.multipart [--rounds 7] [--quick]

The audio routes read one field of a multipart body (``gateway.protocols.engine_api.multipart``).
Issue 29 replaced a regex, cubic on one crafted body, by python-multipart. This times both on
what clients send (an OpenAI SDK-shaped upload encoded by httpx: a ``model`` field, then the
file, at 10 KB, 1 MB and 4 MB) and on the report's body, interleaved round by round (CPU seconds
of this process, so other work on the machine counts little; the median of the rounds). The
regex is given the report's body at the sizes of the report only (beyond, it takes minutes).
Output: stdout and bench/results/multipart.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import time
from pathlib import Path

import httpx

from gateway.protocols.engine_api.multipart import with_model

RESULTS = Path(__file__).resolve().parent / "results"
BOUNDARY = "B"
REPORT_UNIT = b"--B\r\ncontent-disposition:name=model\r\n"


def before(body: bytes, boundary: bytes) -> bytes:
    """What gateway/protocols/engine_api/multipart.py did before issue 29: the regex, then the splice."""
    span = regex_before(body, boundary)
    if span is None:
        return body
    return body[:span[0]] + b"qwen3-embedded" + body[span[1]:]


def regex_before(body: bytes, boundary: bytes) -> tuple[int, int] | None:
    """The pattern of gateway/protocols/engine_api/multipart.py before issue 29 (the model part's value)."""
    part = re.compile(
        rb"(--" + re.escape(boundary) + rb"\r\n(?:[^\r\n]+\r\n)*?content-disposition:[^\r\n]*"
        rb"\bname=\"?model\"?(?:;[^\r\n]*)?\r\n(?:[^\r\n]+\r\n)*?\r\n)(.*?)(\r\n--" + re.escape(boundary) + rb")",
        re.I | re.S)
    found = part.search(body)
    return None if found is None else found.span(2)


def upload(size: int) -> tuple[bytes, str]:
    audio = os.urandom(size)
    request = httpx.Request("POST", "http://gateway/v1/audio/transcriptions",
                            data={"model": "stack-2.9", "language": "en", "response_format": "json"},
                            files={"file": ("speech.wav", audio, "audio/wav")})
    return request.read(), request.headers["content-type"]


def after(body: bytes, content_type: str) -> None:
    try:
        with_model(body, content_type, lambda name: "qwen3-embedded" if name == "stack-2.9" else None)
    except Exception:  # the report's body is refused with a 400: that is the work measured
        pass


def cpu_seconds(call, *args) -> float:
    started = time.process_time()
    call(*args)
    return time.process_time() - started


def cases(quick: bool) -> dict[str, tuple]:
    sizes = {"10 KB": 10_000} if quick else {"10 KB": 10_000, "1 MB": 1_000_000, "4 MB": 4_000_000}
    found = {}
    for name, size in sizes.items():
        body, content_type = upload(size)
        boundary = content_type.split("boundary=", 1)[1].encode()
        found[f"upload, {name}"] = (body, content_type, boundary)
    report_sizes = [3_700] if quick else [3_700, 7_400, 14_800]
    for size in report_sizes:
        found[f"report's body, {size / 1000:.1f} KB"] = (REPORT_UNIT * (size // len(REPORT_UNIT)),
                                                         f"multipart/form-data; boundary={BOUNDARY}", b"B")
    if not quick:
        found["report's body, 4 MB (after only)"] = (REPORT_UNIT * (4_000_000 // len(REPORT_UNIT)),
                                                     f"multipart/form-data; boundary={BOUNDARY}", b"B")
    return found


def run(rounds: int, quick: bool) -> dict:
    measured: dict[str, dict[str, list[float]]] = {}
    table = cases(quick)
    for _ in range(rounds):  # interleaved: each case, before then after, every round
        for name, (body, content_type, boundary) in table.items():
            times = measured.setdefault(name, {"before": [], "after": []})
            if "after only" not in name:
                times["before"].append(cpu_seconds(before, body, boundary))
            times["after"].append(cpu_seconds(after, body, content_type))
    return {name: {side: statistics.median(values) * 1000 for side, values in times.items() if values}
            for name, times in measured.items()}


def report(results: dict) -> str:
    lines = ["| body | regex before (ms CPU) | python-multipart after (ms CPU) |", "|---|---:|---:|"]
    for name, sides in results.items():
        before = f"{sides['before']:.2f}" if "before" in sides else "-"
        lines.append(f"| {name} | {before} | {sides['after']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="small bodies, for a smoke run")
    args = parser.parse_args(argv)
    results = run(args.rounds, args.quick)
    text = report(results)
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "multipart.json").write_text(json.dumps(results, indent=2))
    (RESULTS / "multipart.md").write_text(text + "\n")


if __name__ == "__main__":
    main()
