"""The vLLM command launch_vllm.sh builds, per device and settings (--print-command: nothing starts)."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

LAUNCHER = Path(__file__).resolve().parents[2] / "launch_vllm.sh"
# Settings a developer may have exported must not leak into these expectations.
LAUNCHER_SETTINGS = ("MODEL", "SERVED_MODEL_NAME", "MODEL_ALIASES", "MAX_MODEL_LEN", "GPU_MEMORY_UTILIZATION",
                     "TENSOR_PARALLEL_SIZE", "ENABLE_PREFIX_CACHING", "ENABLE_TOOL_CALLS", "TOOL_CALL_PARSER",
                     "DTYPE", "VLLM_API_KEY", "VLLM_HOST", "VLLM_PORT", "VLLM_CPU_KVCACHE_SPACE",
                     "ENGINE_SCHEDULING_POLICY")


def command(*extra: str, **env: str) -> list[str]:
    base = {key: value for key, value in os.environ.items() if key not in LAUNCHER_SETTINGS}
    done = subprocess.run(["bash", str(LAUNCHER), "--print-command", *extra], env=base | env,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return shlex.split(done.stdout)


def flag(argv: list[str], name: str) -> str:
    return argv[len(argv) - 1 - argv[::-1].index(name) + 1]  # the last occurrence wins, as in argparse


def test_cpu_without_a_model_serves_the_embedded_model() -> None:
    argv = command(ENGINE_DEVICE="cpu")
    assert flag(argv, "--model").endswith(".cache/models/embedded-qwen3")
    assert flag(argv, "--served-model-name") == "qwen3-embedded"
    assert flag(argv, "--max-model-len") == "65536"
    assert {"--enforce-eager", "--enable-prefix-caching", "--enable-auto-tool-choice"} <= set(argv)
    assert flag(argv, "--tool-call-parser") == "hermes"
    assert flag(argv, "--dtype") == "bfloat16"
    assert "VLLM_CPU_KVCACHE_SPACE=1" in argv
    assert "--gpu-memory-utilization" not in argv


def test_gpu_without_a_model_serves_qwen3_4b() -> None:
    argv = command(ENGINE_DEVICE="gpu")
    assert flag(argv, "--model") == "Qwen/Qwen3-4B-Instruct-2507"
    assert flag(argv, "--served-model-name") == "Qwen/Qwen3-4B-Instruct-2507"
    assert flag(argv, "--max-model-len") == "32768"
    assert flag(argv, "--gpu-memory-utilization") == "0.90"
    assert flag(argv, "--tensor-parallel-size") == "1"
    assert "--enforce-eager" not in argv


def test_settings_come_from_the_environment() -> None:
    argv = command(ENGINE_DEVICE="gpu", MODEL="Qwen/Qwen2.5-Coder-7B-Instruct", SERVED_MODEL_NAME="coder",
                   MODEL_ALIASES="stack-2.9, gpt-4o-mini", MAX_MODEL_LEN="16384", GPU_MEMORY_UTILIZATION="0.5",
                   TENSOR_PARALLEL_SIZE="2", ENABLE_PREFIX_CACHING="false", ENABLE_TOOL_CALLS="false",
                   VLLM_HOST="0.0.0.0", VLLM_PORT="9001")
    names = argv[argv.index("--served-model-name") + 1: argv.index("--host")]
    assert names == ["coder", "stack-2.9", "gpt-4o-mini"]
    assert flag(argv, "--max-model-len") == "16384"
    assert flag(argv, "--gpu-memory-utilization") == "0.5"
    assert flag(argv, "--tensor-parallel-size") == "2"
    assert "--no-enable-prefix-caching" in argv and "--enable-prefix-caching" not in argv
    assert "--enable-auto-tool-choice" not in argv
    assert (flag(argv, "--host"), flag(argv, "--port")) == ("0.0.0.0", "9001")


def test_the_priority_scheduler_is_a_setting() -> None:
    assert "--scheduling-policy" not in command(ENGINE_DEVICE="cpu")  # vLLM's default: fcfs
    assert "--scheduling-policy" not in command(ENGINE_DEVICE="cpu", ENGINE_SCHEDULING_POLICY="fcfs")
    assert flag(command(ENGINE_DEVICE="cpu", ENGINE_SCHEDULING_POLICY="priority"), "--scheduling-policy") == "priority"
    assert flag(command(ENGINE_DEVICE="gpu", ENGINE_SCHEDULING_POLICY="priority"), "--scheduling-policy") == "priority"


def test_extra_flags_come_last_so_they_override() -> None:
    argv = command("--max-model-len", "4096", "--max-num-seqs", "8", ENGINE_DEVICE="cpu")
    assert argv[-4:] == ["--max-model-len", "4096", "--max-num-seqs", "8"]
    assert flag(argv, "--max-model-len") == "4096"


def test_api_key_stays_out_of_the_command_line() -> None:
    argv = command(ENGINE_DEVICE="cpu", VLLM_API_KEY="s3cret-value")
    assert "VLLM_API_KEY=<set>" in argv
    assert not any("s3cret-value" in arg for arg in argv)
    assert "--api-key" not in argv


@pytest.mark.parametrize(("env", "reason"), [
    ({"VLLM_PORT": "99999"}, "VLLM_PORT must be a port number"),
    ({"ENGINE_DEVICE": "tpu"}, "ENGINE_DEVICE must be auto, gpu or cpu"),
    ({"MODEL": "not a model"}, "MODEL is neither an existing directory nor a hub id"),
    ({"ENGINE_SCHEDULING_POLICY": "lifo"}, "ENGINE_SCHEDULING_POLICY must be fcfs or priority, got 'lifo'"),
])
def test_bad_settings_are_refused_in_one_line(env: dict[str, str], reason: str) -> None:
    base = {key: value for key, value in os.environ.items() if key not in LAUNCHER_SETTINGS}
    done = subprocess.run(["bash", str(LAUNCHER), "--print-command"], env=base | {"ENGINE_DEVICE": "cpu"} | env,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith("launch_vllm.sh: error: ") and reason in line


def commands(**env: str) -> list[list[str]]:
    """--print-command of a fleet: one engine command per line."""
    base = {key: value for key, value in os.environ.items() if key not in LAUNCHER_SETTINGS + ("ENGINE_COUNT",)}
    done = subprocess.run(["bash", str(LAUNCHER), "--print-command"], env=base | env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [shlex.split(line) for line in done.stdout.splitlines()]


def test_engine_count_starts_that_many_engines_on_consecutive_ports() -> None:
    argvs = commands(ENGINE_DEVICE="cpu", ENGINE_COUNT="3", VLLM_PORT="9300", VLLM_CPU_OMP_THREADS_BIND="0|1")
    assert [flag(argv, "--port") for argv in argvs] == ["9300", "9301", "9302"]
    assert [next(arg for arg in argv if arg.startswith("VLLM_CPU_OMP_THREADS_BIND=")) for argv in argvs] == [
        "VLLM_CPU_OMP_THREADS_BIND=0", "VLLM_CPU_OMP_THREADS_BIND=1", "VLLM_CPU_OMP_THREADS_BIND=0"]
    assert len({tuple(a for a in argv if not a.startswith("VLLM_CPU_OMP")) for argv in argvs}) == 3  # only ports differ
    assert all(flag(argv, "--served-model-name") == "qwen3-embedded" for argv in argvs)


@pytest.mark.parametrize(("count", "port", "reason"), [
    ("0", "8001", "ENGINE_COUNT must be a whole number of engines (1 or more), got '0'"),
    ("two", "8001", "ENGINE_COUNT must be a whole number of engines (1 or more), got 'two'"),
    ("3", "65534", "ENGINE_COUNT=3 engines from VLLM_PORT=65534 need ports beyond 65535"),
])
def test_a_wrong_engine_count_is_refused_by_name(count: str, port: str, reason: str) -> None:
    base = {key: value for key, value in os.environ.items() if key not in LAUNCHER_SETTINGS}
    done = subprocess.run(["bash", str(LAUNCHER), "--print-command"], capture_output=True, text=True, timeout=30,
                          env=base | {"ENGINE_DEVICE": "cpu", "ENGINE_COUNT": count, "VLLM_PORT": port})
    assert done.returncode == 1 and done.stderr.strip() == f"launch_vllm.sh: error: {reason}"
