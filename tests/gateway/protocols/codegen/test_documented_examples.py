"""Every example of the Stack 2.9 API documentation, run as written against gateway + real engine.

The snippets below are docs/codegen.md's, character for character (tests/docs checks it), except that
``http://localhost:8000`` is replaced by the test server's address: curl commands run in
bash, Python snippets run with ``exec`` (so the test can look at the ``response`` they
got), the JavaScript snippet runs in node. The engine's random tiny model writes
gibberish, so the tests check the contract: shapes, types, counts and finish reasons.
"""

from __future__ import annotations

import json
import subprocess

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.engine]

DOCS_URL = "http://localhost:8000"
GENERATE_KEYS = {"generated_text", "prompt", "model", "num_tokens", "finish_reason", "generated_texts"}

HEALTH_CURL = "curl http://localhost:8000/health"
MODEL_INFO_CURL = "curl http://localhost:8000/model-info"

TWO_SUM_CURL = r"""curl -X POST http://localhost:8000/generate \
  -H "Content-Type: application/json" \
  -d '{
    "prompt": "def two_sum(nums, target):\n    \"\"\"Return indices of two numbers that add up to target.\"\"\"\n",
    "max_tokens": 128,
    "temperature": 0.2,
    "top_p": 0.95,
    "do_sample": true,
    "repetition_penalty": 1.1,
    "num_return_sequences": 1
  }'"""

FIBONACCI_CURL = r"""curl -X POST http://localhost:8000/generate \
  -H "Content-Type: application/json" \
  -d '{
    "prompt": "def fibonacci(n):\n    \"\"\"Return first n Fibonacci numbers.\"\"\"\n",
    "max_tokens": 100,
    "temperature": 0.2
  }'"""

REVERSE_STRING_CHAT_CURL = r"""curl -X POST http://localhost:8000/chat \
  -H "Content-Type: application/json" \
  -d '{
    "messages": [
      {"role": "user", "content": "Write a function to reverse a string in Python"},
      {"role": "assistant", "content": "def reverse_string(s):\n    return s[::-1]"},
      {"role": "user", "content": "Make it recursive instead"}
    ],
    "max_tokens": 128,
    "temperature": 0.2,
    "top_p": 0.95
  }'"""

BINARY_SEARCH_CHAT_CURL = r"""curl -X POST http://localhost:8000/chat \
  -H "Content-Type: application/json" \
  -d '{
    "messages": [
      {"role": "user", "content": "Write a binary search function"}
    ],
    "max_tokens": 150
  }'"""

QUICK_SORT_RAW_CURL = r"""curl -X POST http://localhost:8000/generate/raw \
  -H "Content-Type: application/json" \
  -d '{
    "prompt": "def quick_sort(arr):",
    "max_tokens": 200
  }'"""

HELLO_EXTRACT_CURL = r"""curl -X POST http://localhost:8000/extract-code \
  -H "Content-Type: application/json" \
  -d '{"prompt": "```python\ndef hello():\n    print(\"world\")\n```"}'"""

PYTHON_CLIENT = r'''import requests

API_URL = "http://localhost:8000"

# Health check
health = requests.get(f"{API_URL}/health").json()
print(f"Model loaded: {health['model_loaded']}")

# Code completion
response = requests.post(
    f"{API_URL}/generate",
    json={
        "prompt": "def merge_sort(arr):\n    \"\"\"Return sorted array.\"\"\"\n",
        "max_tokens": 200,
        "temperature": 0.3,
    }
).json()

print(response["generated_text"])
'''

PYTHON_TWO_SUM = r'''import requests

API_URL = "http://localhost:8000"

response = requests.post(
    f"{API_URL}/generate",
    json={"prompt": "Write a Python function to solve two_sum", "max_tokens": 256, "temperature": 0.2},
).json()
print(response["generated_text"])
'''

PYTHON_CHAT = r'''import requests

API_URL = "http://localhost:8000"

reply = requests.post(
    f"{API_URL}/chat",
    json={
        "messages": [
            {"role": "system", "content": "You are a helpful coding assistant."},
            {"role": "user", "content": "Write a function to reverse a string in Python"},
            {"role": "assistant", "content": "def reverse_string(s):\n    return s[::-1]"},
            {"role": "user", "content": "Make it recursive instead"},
        ],
        "max_tokens": 128,
        "temperature": 0.2,
    },
).json()
print(reply["message"]["content"])
'''

PYTHON_EXTRACT = r'''import requests

API_URL = "http://localhost:8000"

result = requests.post(
    f"{API_URL}/extract-code",
    json={"prompt": "Here is code:\n```python\nprint('hello world')\n```"},
).json()
print(result["code"])
'''

JAVASCRIPT_CLIENT = r'''const API_URL = "http://localhost:8000";

// Code completion
async function generate(prompt) {
  const response = await fetch(`${API_URL}/generate`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({
      prompt,
      max_tokens: 128,
      temperature: 0.2,
    }),
  });
  return response.json();
}

const result = await generate("def binary_search(arr, target):");
console.log(result.generated_text);
'''


def run_curl(command: str, api_url: str) -> dict:
    done = subprocess.run(["bash", "-c", command.replace(DOCS_URL, api_url)], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def run_python(snippet: str, api_url: str) -> dict:
    namespace: dict = {}
    exec(compile(snippet.replace(DOCS_URL, api_url), "<docs/codegen.md snippet>", "exec"), namespace)
    return namespace


def assert_generation(body: dict, *, prompt: str, max_tokens: int, model: str, sequences: int = 1) -> None:
    assert set(body) == GENERATE_KEYS, body
    assert body["prompt"] == prompt and body["model"] == model
    assert isinstance(body["generated_text"], str)
    assert len(body["generated_texts"]) == sequences and body["generated_texts"][0] == body["generated_text"]
    assert all(isinstance(text, str) for text in body["generated_texts"])
    assert body["finish_reason"] in ("stop", "length")
    assert isinstance(body["num_tokens"], int) and 1 <= body["num_tokens"] <= max_tokens * sequences
    if body["finish_reason"] == "length" and sequences == 1:
        assert body["num_tokens"] == max_tokens


def assert_chat(body: dict, *, max_tokens: int, model: str) -> None:
    assert set(body) == {"message", "model", "num_tokens", "finish_reason"}, body
    assert body["message"]["role"] == "assistant" and isinstance(body["message"]["content"], str)
    assert set(body["message"]) == {"role", "content"} and body["model"] == model
    assert body["finish_reason"] in ("stop", "length")
    assert isinstance(body["num_tokens"], int) and 1 <= body["num_tokens"] <= max_tokens
    if body["finish_reason"] == "length":
        assert body["num_tokens"] == max_tokens


# --- curl ------------------------------------------------------------------------------------------
def test_health(api_url, vllm_engine):
    body = run_curl(HEALTH_CURL, api_url)
    assert body["status"] == "healthy" and body["model_loaded"] is True
    assert body["model_path"] == vllm_engine.model
    assert body["device"] in ("cpu", "cuda") and body["cuda_available"] is (body["device"] == "cuda")


def test_model_info(api_url, vllm_engine):
    body = run_curl(MODEL_INFO_CURL, api_url)
    assert set(body) == {"model_path", "device", "dtype"}
    assert body["model_path"] == vllm_engine.model and body["device"] in ("cpu", "cuda")
    assert body["dtype"] == "torch.bfloat16"  # the embedded checkpoint's config.json says bfloat16


def test_two_sum(api_url, vllm_engine):
    body = run_curl(TWO_SUM_CURL, api_url)
    prompt = 'def two_sum(nums, target):\n    """Return indices of two numbers that add up to target."""\n'
    assert_generation(body, prompt=prompt, max_tokens=128, model=vllm_engine.model)


def test_fibonacci(api_url, vllm_engine):
    body = run_curl(FIBONACCI_CURL, api_url)
    prompt = 'def fibonacci(n):\n    """Return first n Fibonacci numbers."""\n'
    assert_generation(body, prompt=prompt, max_tokens=100, model=vllm_engine.model)


def test_reverse_string_conversation(api_url, vllm_engine):
    assert_chat(run_curl(REVERSE_STRING_CHAT_CURL, api_url), max_tokens=128, model=vllm_engine.model)


def test_binary_search_chat(api_url, vllm_engine):
    assert_chat(run_curl(BINARY_SEARCH_CHAT_CURL, api_url), max_tokens=150, model=vllm_engine.model)


def test_quick_sort_raw(api_url, vllm_engine):
    body = run_curl(QUICK_SORT_RAW_CURL, api_url)
    assert_generation(body, prompt="def quick_sort(arr):", max_tokens=200, model=vllm_engine.model)


def test_extract_hello(api_url):
    assert run_curl(HELLO_EXTRACT_CURL, api_url) == {"code": 'def hello():\n    print("world")'}


# --- Python requests ----------------------------------------------------------------------------
def test_python_client_merge_sort(api_url, vllm_engine, capsys):
    namespace = run_python(PYTHON_CLIENT, api_url)
    assert capsys.readouterr().out.startswith("Model loaded: True\n")
    prompt = 'def merge_sort(arr):\n    """Return sorted array."""\n'
    assert_generation(namespace["response"], prompt=prompt, max_tokens=200, model=vllm_engine.model)


def test_python_two_sum(api_url, vllm_engine):
    response = run_python(PYTHON_TWO_SUM, api_url)["response"]
    assert_generation(response, prompt="Write a Python function to solve two_sum", max_tokens=256,
                      model=vllm_engine.model)


def test_python_reverse_string_conversation_with_system_prompt(api_url, vllm_engine):
    assert_chat(run_python(PYTHON_CHAT, api_url)["reply"], max_tokens=128, model=vllm_engine.model)


def test_python_extract_hello_world(api_url, capsys):
    assert run_python(PYTHON_EXTRACT, api_url)["result"] == {"code": "print('hello world')"}
    assert capsys.readouterr().out == "print('hello world')\n"


# --- JavaScript ---------------------------------------------------------------------------------
def test_javascript_binary_search(api_url):
    # Needs node >= 18 (fetch, top-level await in a module).
    done = subprocess.run(["node", "--input-type=module", "-e", JAVASCRIPT_CLIENT.replace(DOCS_URL, api_url)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith("\n") and "undefined" not in done.stdout.splitlines()
