"""A vLLM engine of the benchmark's own, confined to chosen cores.

On a CPU-only machine the engine computes on the CPU: a gateway that shares
those cores slows the engine itself (its OpenMP threads wait on each other
whenever one is preempted), which says nothing about the gateway. So the
end-to-end measurement starts its own engine through ``launch_vllm.sh``
(embedded model) with every engine process and OpenMP thread on ``cores``, and
runs the gateway and the load generator on the other cores, as on a GPU host
the engine's compute is elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp

from bench.machine import REPO_ROOT
from bench.procs import free_port

START_TIMEOUT = 600.0


@contextlib.asynccontextmanager
async def confined_engine(*, cores: frozenset[int], log_dir: Path) -> AsyncIterator[str]:
    """Start the embedded-model engine on ``cores``; yield its base URL; stop it."""
    port = free_port()
    core_list = ",".join(str(c) for c in sorted(cores))
    env = {**os.environ, "MODEL": "embedded", "VLLM_HOST": "127.0.0.1", "VLLM_PORT": str(port),
           "VLLM_CPU_OMP_THREADS_BIND": core_list, "ENGINE_LOG": str(log_dir / "engine.log"),
           "ENGINE_LOG_TO_STDOUT": "false", "VLLM_API_KEY": ""}
    out = (log_dir / "launcher.log").open("wb")
    process = await asyncio.create_subprocess_exec(
        "bash", str(REPO_ROOT / "launch_vllm.sh"), cwd=REPO_ROOT, env=env, stdout=out,
        stderr=asyncio.subprocess.STDOUT, preexec_fn=lambda: _own_group_on(cores))
    base_url = f"http://127.0.0.1:{port}"
    try:
        await _wait_healthy(base_url, process, log_dir / "launcher.log")
        yield base_url
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), 60)
            except TimeoutError:
                os.killpg(process.pid, signal.SIGKILL)
                await process.wait()
        out.close()


def _own_group_on(cores) -> None:
    """In the child: its own process group (to stop the whole tree), not its own session
    (a new session is a new scheduler autogroup; see tests/support/engine.py), on ``cores``.
    By hand because uvloop's subprocess_exec takes no ``process_group``."""
    os.setpgid(0, 0)
    os.sched_setaffinity(0, cores)


async def _wait_healthy(base_url: str, process, launcher_log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
        while True:
            if process.returncode is not None:
                tail = launcher_log.read_text(errors="replace").strip().splitlines()[-1:]
                raise RuntimeError(f"the benchmark's engine failed to start: {tail}")
            try:
                async with session.get(base_url + "/health") as response:
                    if response.status == 200:
                        return
            except (TimeoutError, aiohttp.ClientError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the benchmark's engine was not healthy after {START_TIMEOUT:.0f}s")
            await asyncio.sleep(0.5)
