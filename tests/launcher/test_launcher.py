"""launch_vllm.sh refuses to start, before loading a model and with a one-line reason, when it cannot work.

What "quickly" meant is asserted, not timed: a refusal never starts the engine (its log file
is never written), and an engine that dies at start-up is reported with its own reason, not
with the start-up deadline's (which the launcher would give only after waiting it out).

The happy path (start, health, serve, stop on SIGTERM) is what the session's
``vllm_engine`` fixture does through the same script; test_engine_fixture.py checks it.
The last test starts an engine of its own, for what only a fresh engine shows.
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.support.engine import _LaunchedEngine
from tests.support.servers import free_port

pytestmark = [pytest.mark.integration, pytest.mark.engine]

LAUNCHER = Path(__file__).resolve().parents[2] / "launch_vllm.sh"
START_DEADLINE = "250"  # ENGINE_START_TIMEOUT where the engine starts: its message must never be the reason


def launch(tmp_path: Path, *args: str, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    # (timeout: only so that a launcher that hangs fails the test instead of hanging it)
    overrides = {"VLLM_HOST": "127.0.0.1", "VLLM_PORT": str(free_port()), "ENGINE_LOG_TO_STDOUT": "false",
                 "ENGINE_LOG": str(tmp_path / "vllm.log"), "VLLM_API_KEY": ""}
    return subprocess.run(["bash", str(LAUNCHER), *args], env=os.environ | overrides | env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout)


def engine_started(tmp_path: Path) -> bool:
    """Whether the launcher started vLLM: it creates the engine's log just before."""
    return (tmp_path / "vllm.log").exists()


def reasons(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.startswith("launch_vllm.sh: error:")]


def test_missing_model_path_is_refused_before_installing_or_starting(tmp_path: Path) -> None:
    missing, venv = tmp_path / "no-such-model", tmp_path / "engine-venv"
    done = launch(tmp_path, MODEL=str(missing), ENGINE_VENV=str(venv))
    assert done.returncode != 0
    assert reasons(done) == [f"launch_vllm.sh: error: model path not found: {missing}"]
    assert not venv.exists(), "a typo in MODEL must not cost a vLLM install"
    assert "starting vLLM" not in done.stderr and not engine_started(tmp_path)


def test_directory_that_is_not_a_model_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty-model"
    empty.mkdir()
    done = launch(tmp_path, MODEL=str(empty))
    assert done.returncode != 0
    assert reasons(done) == [f"launch_vllm.sh: error: not a model directory (no config.json): {empty}"]
    assert "starting vLLM" not in done.stderr and not engine_started(tmp_path)


def test_port_in_use_is_refused_before_loading_the_model(tmp_path: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        done = launch(tmp_path, MODEL="embedded", VLLM_PORT=str(port))
    assert done.returncode != 0
    [reason] = reasons(done)
    assert f"port {port} on 127.0.0.1 is already in use" in reason
    assert "starting vLLM" not in done.stderr and not engine_started(tmp_path)


def test_engine_that_dies_during_start_up_is_reported_with_its_own_reason(tmp_path: Path) -> None:
    # vLLM itself rejects the flag after importing: the launcher must notice the exit,
    # not wait for its start-up deadline, and say why in one line.
    done = launch(tmp_path, "--no-such-flag", MODEL="embedded", ENGINE_START_TIMEOUT=START_DEADLINE)
    assert done.returncode != 0
    [reason] = reasons(done)
    assert "unrecognized arguments: --no-such-flag" in reason
    assert engine_started(tmp_path) and "ENGINE_START_TIMEOUT" not in reason  # noticed the exit, not the deadline


def test_engine_that_runs_out_of_memory_is_reported_as_such(tmp_path: Path) -> None:
    # Far more KV cache than any machine has: vLLM refuses at start-up (nothing is allocated).
    done = launch(tmp_path, MODEL="embedded", VLLM_CPU_KVCACHE_SPACE="100000", ENGINE_START_TIMEOUT=START_DEADLINE)
    assert done.returncode != 0
    [reason] = reasons(done)
    assert reason.startswith("launch_vllm.sh: error: engine ran out of memory")
    assert "VLLM_CPU_KVCACHE_SPACE" in reason
    assert engine_started(tmp_path) and "ENGINE_START_TIMEOUT" not in reason


def test_a_fresh_engine_serves_a_three_token_first_prompt(tmp_path: Path) -> None:
    # On CPUs with AMX, vLLM's AMX attention kernel killed the worker with SIGILL when the
    # engine's very first request was this short (no process had asked Linux for the AMX
    # tile state yet); the launcher's engine/amx/sitecustomize.py asks in every process.
    with _LaunchedEngine(tmp_path) as engine:
        response = httpx.post(f"{engine.base_url}/v1/completions", headers=engine.headers, timeout=120,
                              json={"model": engine.model, "prompt": "def f():", "max_tokens": 16})
        assert response.status_code == 200, response.text
        assert response.json()["usage"]["prompt_tokens"] <= 4
        assert httpx.get(f"{engine.base_url}/health", timeout=10).status_code == 200  # still alive
