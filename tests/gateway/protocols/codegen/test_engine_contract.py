"""The contract where the old service was wrong, checked against the real engine.

Greedy answers are deterministic, so the gateway's answer can be compared with a direct
call to the engine with the same parameters: same text (so the prompt is not echoed and
nothing is added), same usage, same finish reason.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from urllib.parse import urlparse

import orjson
import pytest
import requests

pytestmark = [pytest.mark.integration, pytest.mark.engine]

PROMPT = "def quick_sort(arr):"
GREEDY_ENGINE_PARAMS = {"temperature": 0.0, "top_p": 1.0, "repetition_penalty": 1.1}
CONVERSATION = [
    {"role": "system", "content": "You are a helpful coding assistant."},
    {"role": "user", "content": "Write a function to reverse a string in Python"},
    {"role": "assistant", "content": "def reverse_string(s):\n    return s[::-1]"},
    {"role": "user", "content": "Make it recursive instead"},
]


def post(api_url: str, path: str, body: dict) -> requests.Response:
    return requests.post(api_url + path, json=body, timeout=300)


def test_raw_greedy_text_usage_and_finish_reason_are_the_engines(api_url, engine_call):
    ours = post(api_url, "/generate/raw", {"prompt": PROMPT, "max_tokens": 48, "do_sample": False}).json()
    theirs = engine_call("/v1/completions", {"prompt": PROMPT, "max_tokens": 48, **GREEDY_ENGINE_PARAMS})
    assert ours["generated_text"] == theirs["choices"][0]["text"]
    assert not ours["generated_text"].startswith(PROMPT)
    assert ours["num_tokens"] == theirs["usage"]["completion_tokens"]
    assert ours["finish_reason"] == theirs["choices"][0]["finish_reason"]


def test_generate_returns_the_code_of_the_engines_greedy_text(api_url, engine_call):
    ours = post(api_url, "/generate", {"prompt": PROMPT, "max_tokens": 48, "do_sample": False}).json()
    theirs = engine_call("/v1/completions", {"prompt": PROMPT, "max_tokens": 48, **GREEDY_ENGINE_PARAMS})
    text = theirs["choices"][0]["text"]
    # The embedded model's greedy continuation has no fence (its random weights never write one),
    # so the documented rule for it applies: the whole text, stripped of surrounding whitespace.
    # (What extraction does with fences is checked on literal answers in test_extract.py.)
    assert "```" not in text and "~~~" not in text, f"this check covers answers without fences: {text!r}"
    assert ours["generated_text"] == text.strip()
    assert ours["num_tokens"] == theirs["usage"]["completion_tokens"]


def test_chat_uses_the_engines_chat_template(api_url, engine_call):
    ours = post(api_url, "/chat", {"messages": CONVERSATION, "max_tokens": 40, "temperature": 0}).json()
    theirs = engine_call("/v1/chat/completions", {"messages": CONVERSATION, "max_tokens": 40, "temperature": 0})
    assert ours["message"] == {"role": "assistant", "content": theirs["choices"][0]["message"]["content"]}
    assert ours["num_tokens"] == theirs["usage"]["completion_tokens"]
    assert ours["finish_reason"] == theirs["choices"][0]["finish_reason"]


def test_greedy_is_deterministic_and_temperature_zero_is_greedy(api_url):
    body = {"prompt": PROMPT, "max_tokens": 32}
    first = post(api_url, "/generate/raw", body | {"do_sample": False})
    second = post(api_url, "/generate/raw", body | {"do_sample": False})
    zero = post(api_url, "/generate/raw", body | {"do_sample": True, "temperature": 0.0})
    assert first.status_code == second.status_code == zero.status_code == 200
    assert first.json()["generated_text"] == second.json()["generated_text"] == zero.json()["generated_text"]


def test_sampled_sequences_are_all_returned(api_url):
    response = post(api_url, "/generate/raw",
                    {"prompt": PROMPT, "max_tokens": 16, "temperature": 1.0, "num_return_sequences": 3})
    body = response.json()
    assert response.status_code == 200 and len(body["generated_texts"]) == 3
    assert body["generated_text"] == body["generated_texts"][0]
    assert len(set(body["generated_texts"])) > 1  # three samples of a random model differ
    assert 3 <= body["num_tokens"] <= 48  # the engine's usage: all sequences together


def test_greedy_sequences_repeat_the_one_greedy_answer(api_url):
    single = post(api_url, "/generate/raw", {"prompt": PROMPT, "max_tokens": 16, "do_sample": False}).json()
    many = post(api_url, "/generate/raw",
                {"prompt": PROMPT, "max_tokens": 16, "do_sample": False, "num_return_sequences": 3}).json()
    assert many["generated_texts"] == [single["generated_text"]] * 3
    assert many["num_tokens"] == single["num_tokens"]


# --- the context limit ------------------------------------------------------------------------------
UNIT = "def two_sum(nums, target):\n    pass\n"


def long_prompt(engine_call, *, tokens_at_least: int) -> tuple[str, int, int]:
    """A prompt of at least ``tokens_at_least`` tokens: (prompt, its token count, max_model_len)."""
    unit = engine_call("/tokenize", {"prompt": UNIT})["count"]
    prompt = UNIT * (tokens_at_least // unit + 1)
    measured = engine_call("/tokenize", {"prompt": prompt})
    return prompt, measured["count"], measured["max_model_len"]


def test_a_prompt_longer_than_the_context_is_a_400_naming_the_limit(api_url, engine_call):
    limit = engine_call("/tokenize", {"prompt": "x"})["max_model_len"]
    prompt, count, _ = long_prompt(engine_call, tokens_at_least=limit + 10)
    for path in ("/generate", "/generate/raw"):
        response = post(api_url, path, {"prompt": prompt, "max_tokens": 10})
        assert response.status_code == 400
        detail = response.json()["detail"]
        assert f"{count} tokens" in detail and f"(max_model_len) is {limit} tokens" in detail


def test_a_conversation_longer_than_the_context_is_a_400(api_url, engine_call):
    limit = engine_call("/tokenize", {"prompt": "x"})["max_model_len"]
    prompt, _, _ = long_prompt(engine_call, tokens_at_least=limit + 10)
    response = post(api_url, "/chat", {"messages": [{"role": "user", "content": prompt}], "max_tokens": 10})
    assert response.status_code == 400 and f"is {limit} tokens" in response.json()["detail"]


def test_max_tokens_is_lowered_to_the_room_left_in_the_context(api_url, engine_call):
    limit = engine_call("/tokenize", {"prompt": "x"})["max_model_len"]
    prompt, count, _ = long_prompt(engine_call, tokens_at_least=limit - 60)
    room = limit - count
    assert 0 < room < 100
    ours = post(api_url, "/generate/raw", {"prompt": prompt, "max_tokens": room + 50, "do_sample": False})
    assert ours.status_code == 200
    theirs = engine_call("/v1/completions", {"prompt": prompt, "max_tokens": room, **GREEDY_ENGINE_PARAMS})
    assert ours.json()["generated_text"] == theirs["choices"][0]["text"]
    assert ours.json()["num_tokens"] == theirs["usage"]["completion_tokens"] <= room
    assert ours.json()["finish_reason"] == theirs["choices"][0]["finish_reason"]


# --- input errors ----------------------------------------------------------------------------------
def test_invalid_input_names_the_field(api_url):
    response = post(api_url, "/generate", {"prompt": "x", "num_return_sequences": 11})
    assert response.status_code == 422
    assert [error["loc"] for error in response.json()["detail"]] == [["body", "num_return_sequences"]]
    last_assistant = post(api_url, "/chat", {"messages": CONVERSATION[:3]})
    assert (last_assistant.status_code, last_assistant.json()) == (400, {"detail": "Last message must be from user"})
    empty = post(api_url, "/chat", {"messages": []})
    assert empty.status_code == 400 and "messages" in empty.json()["detail"]


# --- concurrency and disconnects ---------------------------------------------------------------------
class Timeline:
    """When things happened, in one clock, from any thread."""

    def __init__(self) -> None:
        self.at: dict[str, float] = {}

    def mark(self, what: str) -> None:
        self.at[what] = time.monotonic()


def wait_for(condition, *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_health_answers_while_a_long_generation_runs(api_url, vllm_engine):
    asyncio.run(vllm_engine.wait_until_idle())
    timeline = Timeline()
    result: dict = {}

    def generate() -> None:
        result["response"] = post(api_url, "/generate/raw",
                                  {"prompt": PROMPT, "max_tokens": 2000, "do_sample": False})
        timeline.mark("generation answered")

    worker = threading.Thread(target=generate)
    worker.start()
    wait_for(lambda: vllm_engine.metrics().get("vllm:num_requests_running", 0) >= 1, timeout=60,
             what="the generation to run in the engine")
    health = requests.get(api_url + "/health", timeout=60)
    timeline.mark("health answered")
    generation_still_running = worker.is_alive()
    worker.join(300)

    assert health.status_code == 200 and health.json()["model_loaded"] is True
    assert generation_still_running
    assert timeline.at["health answered"] < timeline.at["generation answered"]
    # Greedy, without ignore_eos (the code API has none): the embedded model may end before 2,000
    # (a fresh build once stopped at 1,667); the answer is whole either way.
    assert result["response"].status_code == 200 and 0 < result["response"].json()["num_tokens"] <= 2000


def test_a_client_that_leaves_aborts_the_generation_in_the_engine(api_url, vllm_engine):
    asyncio.run(vllm_engine.wait_until_idle())
    generated_before = vllm_engine.metrics().get("vllm:generation_tokens_total", 0)
    body = orjson.dumps({"prompt": PROMPT, "max_tokens": 2000, "do_sample": False})
    address = urlparse(api_url)
    with socket.create_connection((address.hostname, address.port)) as client:
        client.sendall(b"POST /generate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                       b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        try:
            wait_for(lambda: vllm_engine.metrics().get("vllm:num_requests_running", 0) >= 1, timeout=60,
                     what="the generation to run in the engine")
        except AssertionError as exc:  # say what the gateway answered instead of generating
            client.settimeout(5)
            raise AssertionError(f"{exc}; the gateway answered {client.recv(4096)!r}") from None
    vllm_engine.wait_until_nothing_runs(timeout=60)  # the engine dropped the generation
    generated = vllm_engine.metrics().get("vllm:generation_tokens_total", 0) - generated_before
    assert generated < 2000  # aborted, not finished for nobody
