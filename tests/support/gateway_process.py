"""The gateway as its own process (``python -m gateway``), for tests that kill or restart it."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.support.servers import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]


class GatewayProcess:
    def __init__(self, engine, log_path: Path, **env: str) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.env = os.environ | {
            "VLLM_BASE_URL": engine.base_url,
            "VLLM_API_KEY": engine.api_key or "",
            "PORT": str(self.port),
            "HOST": "127.0.0.1",
            "ACCESS_LOG": "false",
            "ENGINE_POLL_INTERVAL": "60",
            **env,
        }
        self.process: subprocess.Popen | None = None
        self.ready_path = "/readyz"  # what start() waits for (/livez for a gateway whose engine is down)

    async def start(self, timeout: float = 30) -> "GatewayProcess":
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen([sys.executable, "-m", "gateway"], cwd=REPO_ROOT, env=self.env,
                                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient() as client:
            while True:
                assert self.process.poll() is None, f"gateway exited at start-up (log: {self.log_path})"
                try:
                    if (await client.get(self.base_url + self.ready_path)).status_code == 200:
                        return self
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, f"gateway not ready in {timeout}s (log: {self.log_path})"
                await asyncio.sleep(0.05)

    async def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        """Send ``sig`` and wait for the process to exit; its exit code."""
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else 0
        self.process.send_signal(sig)
        try:
            return await asyncio.to_thread(self.process.wait, timeout)
        except subprocess.TimeoutExpired:  # a frozen gateway must not outlive its test
            self.process.kill()
            await asyncio.to_thread(self.process.wait)
            raise AssertionError(f"gateway still running {timeout}s after {sig!r}: killed (log: {self.log_path})")
