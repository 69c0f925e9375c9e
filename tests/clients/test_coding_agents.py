"""Claude Code and Codex CLI, as installed from npm (scripts/install_agent_clis.sh), and the ``llm`` CLI,
against the gateway.

Each runs non-interactively with its stock settings (docs/clients/claude-code.md, codex.md):
only the base URL, the key and the model name are set, in a throwaway HOME / CODEX_HOME, with
every telemetry and update check the client offers turned off. What must hold: the client
exits 0 with an answer, after its own full-size first request (Claude Code's ~49 KB with its
tools and ``max_tokens: 32000``, Codex's ~40 KB) went through: the context holds it (with
room for the 32,000: ~20k + 32,000 tokens), and the embedded model ended its answer by itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.clients.conftest import AGENT_BIN, KEY
from tests.support.docs import code_blocks, read_doc

pytestmark = pytest.mark.integration
RUN_TIMEOUT = 300  # a CPU prefill of Claude Code's ~20k-token prompt takes seconds here; a few of them


def run(argv: list[str], env: dict, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT)


def claude_env(url: str, model: str, home) -> dict:
    """The environment docs/clients/claude-code.md gives, with this gateway's address, key and model."""
    exports = code_blocks(read_doc("clients/claude-code.md"), "## Settings", "bash")[0]
    env = {"PATH": os.environ["PATH"], "HOME": str(home)}
    for line in exports.splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        env[name] = value.split("#")[0].strip()
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8000" and env["DISABLE_TELEMETRY"] == "1"
    return env | {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": KEY, "ANTHROPIC_MODEL": model,
                  "ANTHROPIC_SMALL_FAST_MODEL": model}


def codex_home(url: str, model: str, home) -> dict:
    """A CODEX_HOME with the config.toml of docs/clients/codex.md, naming this gateway and model."""
    config = code_blocks(read_doc("clients/codex.md"), "## Settings", "toml")[0]
    assert 'base_url = "http://127.0.0.1:8000/v1"' in config and "enabled = false" in config
    codex = home / "codex"
    codex.mkdir()
    (codex / "config.toml").write_text(config.replace("http://127.0.0.1:8000", url)
                                       .replace('model = "qwen3-embedded"', f'model = "{model}"'))
    return {"PATH": os.environ["PATH"], "HOME": str(home), "CODEX_HOME": str(codex), "STACK_GATEWAY_API_KEY": KEY}


def messages_requests(recorder) -> list[dict]:
    return [note for note in recorder.seen if note["path"] == "/v1/messages"]


def test_claude_code_print_mode_answers_through_the_gateway(client_gateway, vllm_engine, tmp_path):
    url, recorder = client_gateway
    done = run([str(AGENT_BIN / "claude"), "-p", "say hi"], claude_env(url, vllm_engine.model, tmp_path), tmp_path)
    assert done.returncode == 0, done.stderr + done.stdout
    assert done.stdout.strip()
    sent = messages_requests(recorder)
    assert sent and all(note["status"] == 200 for note in sent)
    biggest = max(sent, key=lambda note: note["bytes"])
    assert biggest["bytes"] > 40_000 and biggest["tools"] >= 10  # its full prompt went through
    assert biggest["max_tokens"] == 32000 and biggest["stream"] is True  # what it asks of a model it does not know


def test_claude_code_stream_json_ends_with_a_successful_result(client_gateway, vllm_engine, tmp_path):
    url, _ = client_gateway
    done = run([str(AGENT_BIN / "claude"), "-p", "--output-format", "stream-json", "--verbose", "say hi"],
               claude_env(url, vllm_engine.model, tmp_path), tmp_path)
    assert done.returncode == 0, done.stderr + done.stdout
    events = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    result = events[-1]
    assert result["type"] == "result" and result["subtype"] == "success" and result["is_error"] is False
    assert result["result"].strip()
    assert any(event["type"] == "assistant" for event in events)


def test_codex_exec_and_resume_last_answer_through_the_gateway(client_gateway, vllm_engine, tmp_path):
    url, recorder = client_gateway
    env = codex_home(url, vllm_engine.model, tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    codex = str(AGENT_BIN / "codex")
    first = run([codex, "exec", "--skip-git-repo-check", "say hi"], env, work)
    assert first.returncode == 0, first.stderr + first.stdout
    resumed = run([codex, "exec", "--skip-git-repo-check", "resume", "--last", "and again"], env, work)
    assert resumed.returncode == 0, resumed.stderr + resumed.stdout
    sent = [note for note in recorder.seen if note["path"] == "/v1/responses"]
    assert len(sent) >= 2 and all(note["status"] == 200 for note in sent)
    assert sent[0]["bytes"] > 20_000 and sent[0]["stream"] is True
    assert sent[-1]["bytes"] > sent[0]["bytes"]  # the resumed turn carries the first one


def test_llm_cli_answers_with_the_documented_model_file(client_gateway, vllm_engine, tmp_path):
    url, recorder = client_gateway
    models = code_blocks(read_doc("clients/llm.md"), "# `llm` (Simon Willison's CLI)", "yaml")[0]
    (tmp_path / "extra-openai-models.yaml").write_text(
        models.replace("http://127.0.0.1:8000", url).replace("qwen3-embedded", vllm_engine.model))
    llm = str(Path(sys.executable).parent / "llm")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "LLM_USER_PATH": str(tmp_path)}
    assert run([llm, "keys", "set", "stack", "--value", KEY], env, tmp_path).returncode == 0
    done = run([llm, "-m", "stack", "say hi"], env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
    assert any(note["path"] == "/v1/chat/completions" and note["user_agent"].startswith("OpenAI/Python")
               for note in recorder.seen)
