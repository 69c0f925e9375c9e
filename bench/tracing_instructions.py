"""Instructions per traced request in this process, counted by callgrind: the figure load does not move.

    python -m bench.tracing_instructions [--requests 250]      (PYTHONPATH=<tree> measures that tree)

The tracing calls of ``bench.tracing_path``'s traced non-streamed request (each request with its
own id and its answer's), the spans encoded and exported through the gateway's own OTLP/HTTP
exporter with its HTTP client replaced by one that answers at once; then ``force_flush``.
Everything tracing does per request in the gateway's process but the HTTP post. Run under
valgrind's callgrind, counting only inside ``functools.reduce`` (the measured loop), so the
interpreter's start and the warm-up are left out; fewer requests than one export batch (512
spans), so that no export falls in the batch processor's own thread, which the count leaves out.
Needs valgrind (``apt-get install valgrind``).
"""

from __future__ import annotations

import argparse
import functools
import os
import subprocess
import sys
import tempfile
import types
from pathlib import Path

WARM_UP = 600


def measured(requests: int) -> None:
    """The loop callgrind counts (inside ``functools.reduce``)."""
    import bench.tracing_path as path
    from gateway.config import Settings
    from gateway.http.context import RequestContext
    from gateway.tracing import hooks
    from gateway.tracing.provider import Tracing, otlp_exporter

    ids = [f"{n:024x}" for n in range(WARM_UP + requests)]
    answers = [path.ANSWER.replace(b"chatcmpl-1", f"chatcmpl-{n:024x}".encode()) for n in range(WARM_UP + requests)]
    settings = Settings(otel_exporter_otlp_traces_endpoint="http://127.0.0.1:9/v1/traces",
                        otel_bsp_max_queue_size=100_000, otel_bsp_schedule_delay=100_000_000)
    exporter = otlp_exporter(settings)
    answered = types.SimpleNamespace(success=True, error=None, status_code=200)
    exporter._client = types.SimpleNamespace(export=lambda data: answered)  # (the SDK exporter's HTTP client)
    tracing = Tracing.from_settings(settings, exporter=exporter)

    def one(n: int) -> None:
        request = RequestContext(ids[n], scope=path.SCOPE, principal=path.PRINCIPAL)
        trace = tracing.begin(request, path.SCOPE)
        trace.queued("interactive", "dispatched", 0.0)
        hooks.unary_started(request, path.PATH, path.BODY)
        hooks.engine_headers(request, path.ENGINE, "POST", path.PATH, {"content-type": "application/json"},
                             path.ROUTER)
        trace.answered(200, answers[n])
        hooks.request_ended(trace, request, 200)

    for n in range(WARM_UP):
        one(n)
    tracing.force_flush()

    def loop(_accumulated, _item) -> None:
        for n in range(WARM_UP, WARM_UP + requests):
            one(n)
        tracing.force_flush()

    functools.reduce(loop, range(1), None)
    tracing.shutdown()


def count(requests: int) -> float:
    """Instructions per request, from a callgrind run of this module's loop."""
    with tempfile.TemporaryDirectory(prefix="bench-tracing-instr-") as tmp:
        out = Path(tmp) / "callgrind.out"
        subprocess.run(["valgrind", "--tool=callgrind", "--toggle-collect=functools_reduce",
                        f"--callgrind-out-file={out}", sys.executable, "-m", "bench.tracing_instructions",
                        "--requests", str(requests), "--loop"],
                       check=True, capture_output=True, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
        for line in out.read_text(errors="replace").splitlines():
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1]) / requests
    raise RuntimeError("callgrind wrote no total")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=250, help="under 256: one export batch is 512 spans")
    parser.add_argument("--loop", action="store_true", help=argparse.SUPPRESS)  # (the run callgrind counts)
    arguments = parser.parse_args()
    if arguments.loop:
        measured(arguments.requests)
    else:
        print(f"tracing instructions per traced non-streamed request: {count(arguments.requests):,.0f} "
              f"({arguments.requests} requests, callgrind)")
