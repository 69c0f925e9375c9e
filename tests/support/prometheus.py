"""A real Prometheus server for integration tests, and promtool for the rules' own tests.

``prometheus`` (function scope): a launcher; ``await prometheus.start(config)`` writes
``config`` (the dict of a prometheus.yml) into the test's temp dir and starts Debian's
``prometheus`` on a free localhost port with its TSDB in that temp dir, then returns once the
server says it is ready. The server is stopped (SIGTERM, then SIGKILL) when the test ends.
``promtool``: the path of promtool. Both fail the test with the install hint when the
program is missing (``scripts/install_prometheus.sh`` installs it; ``make test`` runs it).

    STACK_TEST_PROMETHEUS=/path/to/prometheus   # default /usr/bin/prometheus
    STACK_TEST_PROMTOOL=/path/to/promtool       # default /usr/bin/promtool
"""

from __future__ import annotations

import asyncio
import math
import os
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import yaml

from tests.support.servers import free_port

PROMETHEUS = os.environ.get("STACK_TEST_PROMETHEUS", "/usr/bin/prometheus")
PROMTOOL = os.environ.get("STACK_TEST_PROMTOOL", "/usr/bin/promtool")
READY_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
START_ATTEMPTS = 3  # a free port can be taken between picking it and binding it


def _program(path: str) -> str:
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} not found: run scripts/install_prometheus.sh (Debian's prometheus package)",
                    pytrace=False)
    return path


@pytest.fixture
def promtool() -> str:
    """The path of promtool (``promtool check rules``, ``promtool test rules``)."""
    return _program(PROMTOOL)


class PrometheusServer:
    """A running server: its HTTP API, queried the way Grafana and operators query it."""

    def __init__(self, base_url: str, client: httpx.AsyncClient) -> None:
        self.base_url = base_url
        self._client = client

    async def api(self, path: str, **params: str) -> object:
        """``GET /api/v1/<path>``: its ``data``, or an assertion error with Prometheus's own message."""
        response = await self._client.get(f"{self.base_url}/api/v1/{path}", params=params)
        body = response.json()
        assert response.status_code == 200 and body.get("status") == "success", \
            f"Prometheus /api/v1/{path} {params}: {response.status_code} {body.get('errorType')}: {body.get('error')}"
        return body["data"]

    async def query(self, expr: str) -> list[dict]:
        """An instant query's samples (``[{"metric": {...}, "value": [t, "1.5"]}, ...]``); fails on a bad query."""
        data = await self.api("query", query=expr)
        assert data["resultType"] == "vector", f"{expr!r} returned a {data['resultType']}, not a vector"
        return data["result"]

    async def targets(self) -> list[dict]:
        return (await self.api("targets", state="active"))["activeTargets"]

    async def rules(self) -> list[dict]:
        """Every rule Prometheus loaded, each with its group's name under ``group``."""
        groups = (await self.api("rules"))["groups"]
        return [{**rule, "group": group["name"]} for group in groups for rule in group["rules"]]


def finite(samples: list[dict]) -> list[float]:
    """The sample values of a query's answer that are numbers (not NaN, not infinite)."""
    values = [float(sample["value"][1]) for sample in samples]
    return [value for value in values if math.isfinite(value)]


class PrometheusLauncher:
    def __init__(self, workdir: Path, client: httpx.AsyncClient) -> None:
        self.workdir = workdir
        self.process: subprocess.Popen | None = None
        self.log_path = workdir / "prometheus.log"
        self._client = client

    async def start(self, config: dict) -> PrometheusServer:
        program = _program(PROMETHEUS)
        config_path = self.workdir / "prometheus.yml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        for _ in range(START_ATTEMPTS):
            port = free_port()
            with self.log_path.open("ab") as log:
                self.process = subprocess.Popen(
                    [program, f"--config.file={config_path}", f"--storage.tsdb.path={self.workdir / 'data'}",
                     f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
            base_url = f"http://127.0.0.1:{port}"
            if await self._ready(base_url):
                return PrometheusServer(base_url, self._client)
            if "address already in use" not in self._log_text():
                break
        pytest.fail(f"Prometheus did not start: {self._log_text()[-2000:]} (log: {self.log_path})", pytrace=False)

    async def _ready(self, base_url: str) -> bool:
        """Whether the server answered ``/-/ready``; False once it exited."""
        deadline = time.monotonic() + READY_TIMEOUT
        while self.process.poll() is None:
            try:
                if (await self._client.get(f"{base_url}/-/ready")).status_code == 200:
                    return True
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"Prometheus not ready in {READY_TIMEOUT:.0f}s (log: {self.log_path})"
            await asyncio.sleep(0.05)
        return False

    def _log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(STOP_TIMEOUT)


@pytest.fixture
async def prometheus(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[PrometheusLauncher]:
    """A launcher of a real Prometheus (``await prometheus.start(config)``), stopped after the test."""
    async with httpx.AsyncClient(timeout=10) as client:
        launcher = PrometheusLauncher(tmp_path_factory.mktemp("prometheus"), client)
        try:
            yield launcher
        finally:
            await asyncio.to_thread(launcher.stop)
