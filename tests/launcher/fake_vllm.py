"""A stand-in for ``python -m vllm.entrypoints.openai.api_server``, for tests of the scripts around the engine.

Takes vLLM's command line (``--host``, ``--port``, ``--served-model-name``; the rest is ignored),
serves the OpenAI routes of ``bench.fake_upstream`` (``/health``, ``/v1/models``, completions),
and stops as vLLM's server does: on SIGINT or SIGTERM, with exit status 0. It lets run.sh and
launch_vllm.sh be tested with their real process tree and signals, in a second instead of a
model load. ``FAKE_VLLM_CHUNK_DELAY`` (seconds between stream frames) makes streams last.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal

from bench.fake_upstream import FakeEngineConfig, serve


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--served-model-name", nargs="+", default=["fake-model"])
    args, _ = parser.parse_known_args()

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):  # installed even where the shell ignored SIGINT, as uvicorn does
            loop.add_signal_handler(signum, stop.set)
        config = FakeEngineConfig(model=args.served_model_name[0],
                                  chunk_delay=float(os.environ.get("FAKE_VLLM_CHUNK_DELAY", "0")))
        server = await serve(host=args.host, port=args.port, config=config)
        async with server:
            await stop.wait()

    asyncio.run(run())


if __name__ == "__main__":
    main()
