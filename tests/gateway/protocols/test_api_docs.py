"""docs/api.md: its route table is the code's, and every example runs as written against the real engine.

Only the address (``http://localhost:8000``) and the key (``sk-your-key``) are replaced; curl
commands run in bash, Python snippets with ``exec`` (so the test can look at what they got).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from gateway.protocols.common import table
from tests.gateway.protocols.conftest import KEY_A

DOC = (Path(__file__).resolve().parents[3] / "docs" / "api.md").read_text()
BLOCKS = re.findall(r"```(bash|python)\n(.*?)```", DOC, re.S)


def documented_rows() -> list[tuple[str, str, str]]:
    return re.findall(r"^\| `([A-Z]+)` \| `([^`]+)` \| (relayed|gateway|admin|refused) \|", DOC, re.M)


def test_the_documented_route_table_is_the_codes():
    assert documented_rows() == [(row.method, row.path, row.kind) for row in table.ROUTES]
    for row in table.ROUTES:
        for alias in row.aliases:
            assert f"`{alias}`" in DOC, alias


def blocks(language: str, marker: str) -> list[str]:
    found = [code for lang, code in BLOCKS if lang == language and marker in code]
    assert found, f"no {language} example with {marker!r}"
    return found


def run_curl(command: str, url: str) -> dict:
    done = subprocess.run(["bash", "-c", command.replace("http://localhost:8000", url).replace("sk-your-key", KEY_A)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def run_python(code: str, url: str) -> dict:
    namespace: dict = {}
    exec(compile(code.replace("http://localhost:8000", url).replace("sk-your-key", KEY_A), "<docs/api.md>", "exec"),
         namespace)
    return namespace


@pytest.mark.integration
@pytest.mark.engine
def test_every_curl_example_answers(gateway_url, vllm_engine):
    (responses,) = blocks("bash", "/v1/responses")
    assert run_curl(responses, gateway_url)["object"] == "response"
    (messages,) = blocks("bash", "/v1/messages")
    reply = run_curl(messages, gateway_url)
    assert reply["type"] == "message" and reply["content"][0]["type"] == "text"
    (tokenize,) = blocks("bash", "/tokenize")
    assert run_curl(tokenize, gateway_url)["count"] > 0


@pytest.mark.integration
@pytest.mark.engine
def test_the_responses_example(gateway_url, vllm_engine):
    (code,) = blocks("python", "client.responses")
    got = run_python(code, gateway_url)
    assert got["follow_up"].previous_response_id == got["first"].id
    events = got["events"] + got["rest"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    # A sampled answer may end before its max_output_tokens or be cut there: the terminal event says which.
    assert events[-1].response.status in ("completed", "incomplete")
    assert events[-1].type == {"completed": "response.completed", "incomplete": "response.incomplete"}[
        events[-1].response.status]


@pytest.mark.integration
@pytest.mark.engine
def test_the_anthropic_example(gateway_url, vllm_engine):
    (code,) = blocks("python", "anthropic.Anthropic")
    got = run_python(code, gateway_url)
    assert got["message"].content[0].text and got["tokens"].input_tokens > 0
    assert got["stream"].get_final_message().stop_reason in ("end_turn", "max_tokens")


@pytest.mark.integration
@pytest.mark.engine
def test_the_tokenize_example(gateway_url, vllm_engine):
    (code,) = blocks("python", "/detokenize")
    got = run_python(code, gateway_url)
    assert got["text"] == "Hello there" and got["tokens"]
