"""Starting ``python -m gateway`` as an operator does: a setting it cannot run with, several workers.

A refused setting stops the process before it listens, with one JSON line naming the variable
and exit code 2: it was a traceback, and a feature's setting or ``FEATURES`` with ``WORKERS`` > 1
left uvicorn restarting a crashing worker for ever behind a bound port. Every worker of
``WORKERS`` > 1 logs JSON lines and the access log (they logged nothing below a warning).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

import httpx
import orjson
import pytest

from tests.support.gateway_process import REPO_ROOT, GatewayProcess
from tests.support.servers import free_port

REFUSED = 2


@pytest.mark.parametrize(("env", "named", "hidden"), [
    ({"PORT": "eighty-eighty", "WORKERS": "0"}, ["PORT: Input should be a valid integer", "WORKERS:"], "eighty"),
    ({"WORKERS": "2", "PLAYGROUND": "maybe-x"}, ["PLAYGROUND: Input should be 'auto', 'on' or 'off'"], "maybe-x"),
    ({"WORKERS": "2", "FEATURES": "marketplace,nonesuch"}, ["FEATURES names nonesuch"], None),
])
def test_a_refused_setting_stops_the_gateway_before_it_listens_naming_the_variable(tmp_path, env, named, hidden):
    port = free_port()
    environment = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PORT": str(port),
                   "DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/gw.db", **env}
    try:
        done = subprocess.run([sys.executable, "-m", "gateway"], cwd=REPO_ROOT, env=environment,
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    except subprocess.TimeoutExpired as running:  # (subprocess.run has killed it)
        raise AssertionError(f"the gateway was still running after 60 s: {running.stderr!r}") from None
    assert done.returncode == REFUSED, done.stderr.decode()[-3000:]
    lines = done.stderr.decode().splitlines()
    assert len(lines) == 1, lines  # one line, no traceback
    record = orjson.loads(lines[0])
    assert record["level"] == "error" and record["msg"].startswith("refusing to start: ")
    for words in named:
        assert words in record["msg"]
    assert hidden is None or hidden not in record["msg"]  # the variable is named, the value given never shown
    assert b"Uvicorn running" not in done.stdout + done.stderr


async def test_every_worker_logs_json_lines_and_the_access_log(fake_engine, tmp_path):
    log_path = tmp_path / "gw.log"
    gateway = await GatewayProcess(fake_engine, log_path, WORKERS="2", ACCESS_LOG="true", SESSION_STORE="off",
                                   DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path}/gw.db").start()
    try:
        async with httpx.AsyncClient(base_url=gateway.base_url, timeout=30) as client:
            answers = await asyncio.gather(*(client.get("/v1/models", headers={"X-Request-ID": f"probe-{n}"})
                                             for n in range(8)))
    finally:
        assert await gateway.stop() == 0
    assert {answer.status_code for answer in answers} == {200}
    lines = log_path.read_bytes().decode().splitlines()
    records = [orjson.loads(line) for line in lines if line.startswith("{")]
    assert len(records) == len(lines), [line for line in lines if not line.startswith("{")][:5]
    access = {record["request_id"]: record for record in records if record["logger"] == "gateway.access"}
    for n in range(8):
        assert access[f"probe-{n}"]["path"] == "/v1/models" and access[f"probe-{n}"]["status"] == 200


def test_workers_keeping_sessions_or_responses_in_memory_are_warned_about():
    # Each worker keeps its own: a resume or a stored response reaches its worker one time in WORKERS (404 else).
    from gateway.cli import start_warnings
    from gateway.config import Settings

    keys = {"api_keys": "sk-test-0123456789"}
    for store in ("memory", "off"):
        warned = [w for w in start_warnings(Settings(workers=2, session_store=store, **keys)) if "WORKERS=2" in w]
        assert len(warned) == 1 and f"SESSION_STORE={store}" in warned[0] and "404" in warned[0]
        assert start_warnings(Settings(workers=1, session_store=store, **keys)) == []
    assert start_warnings(Settings(workers=2, session_store="sqlite", **keys)) == []
