"""The code API's service logic against a fake engine: what is sent to vLLM, what comes back.

The fakes (tests/support/codegen_fakes.py) stand for the core's engine client (``post_json``)
and engine state; each test scripts the engine's answers and checks both the request the service made and the
answer or error it gave.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from gateway.config import Settings
from gateway.engines.errors import BadGateway, EngineTimeout, EngineUnavailable
from gateway.http.context import RequestContext
from gateway.http.errors import GatewayError
from gateway.protocols.codegen import service
from gateway.protocols.codegen.protocol import ChatMessage, ChatRequest, GenerateRequest
from tests.support.codegen_fakes import (
    MODEL_NOT_LOADED,
    FakeEngineState,
    FakeUpstream,
    chat_completion,
    completion,
    engine_error,
    tokenized,
    upstream,
)

SETTINGS = Settings(default_max_tokens=512, default_temperature=0.2, default_top_p=0.95)
FENCED = "Sure:\n```js\nconsole.log(1)\n```\nand\n```python\ndef f():\n    return 1\n```\nbye"


async def run_generate(up: FakeUpstream, *, extract: bool = False, engine: FakeEngineState | None = None,
                       settings: Settings = SETTINGS, **body: Any):
    return await service.generate(
        request=GenerateRequest(**({"prompt": "def f():"} | body)), extract=extract, upstream=up,
        engine=engine or FakeEngineState(), settings=settings, context=RequestContext("rid-1"),
    )


# --- /generate and /generate/raw -------------------------------------------------------
async def test_raw_sends_the_prompt_as_plain_text_and_reports_the_engine_usage():
    up = upstream(_tokenize=tokenized(4), _v1_completions=completion(" return 42\n", tokens=9, finish="stop"))
    answer = await run_generate(up, prompt="def f():", max_tokens=100, temperature=0.7, top_p=0.9)

    assert up.paths == ["/tokenize", "/v1/completions"]
    assert up.payload("/tokenize") == {"model": "served-model", "prompt": "def f():"}
    sent = up.payload("/v1/completions")
    assert sent["prompt"] == "def f():" and sent["model"] == "served-model"
    assert "messages" not in sent and not sent.get("echo")  # plain completion; the prompt is not echoed
    assert (sent["max_tokens"], sent["temperature"], sent["top_p"], sent["n"], sent["repetition_penalty"]) == (
        100, 0.7, 0.9, 1, 1.1)
    assert all(request_id == "rid-1" for _, _, request_id in up.calls)

    assert answer.generated_text == " return 42\n"  # as generated: not stripped, no prompt in front
    assert answer.generated_texts == [" return 42\n"]
    assert (answer.prompt, answer.model, answer.num_tokens, answer.finish_reason) == ("def f():", "served-model", 9, "stop")


async def test_generate_extracts_the_preferred_code_block_of_every_sequence():
    up = upstream(_tokenize=tokenized(4), _v1_completions=completion(FENCED, "plain text  \n", order=[1, 0]))
    answer = await run_generate(up, extract=True, num_return_sequences=2)
    assert answer.generated_texts == ["def f():\n    return 1", "plain text"]
    assert answer.generated_text == "def f():\n    return 1"


async def test_generate_honours_the_requested_language_and_all_blocks():
    up = upstream(_tokenize=tokenized(4), _v1_completions=completion(FENCED))
    assert (await run_generate(up, extract=True, language="javascript")).generated_text == "console.log(1)"
    up = upstream(_tokenize=tokenized(4), _v1_completions=completion(FENCED))
    answer = await run_generate(up, extract=True, language=None, all_blocks=True)
    assert answer.generated_text == "console.log(1)\n\ndef f():\n    return 1"


async def test_sampled_sequences_come_back_in_index_order_with_the_total_usage():
    up = upstream(_tokenize=tokenized(4), _v1_completions=completion("a", "b", "c", tokens=30, order=[2, 0, 1]))
    answer = await run_generate(up, num_return_sequences=3, temperature=0.8)
    assert up.payload("/v1/completions")["n"] == 3
    assert answer.generated_texts == ["a", "b", "c"] and answer.generated_text == "a"
    assert answer.num_tokens == 30  # the engine's completion_tokens: every sequence together


@pytest.mark.parametrize("body", [{"do_sample": False}, {"temperature": 0.0}, {"top_p": 0.0}])
async def test_greedy_requests_ask_the_engine_once_and_repeat_the_answer(body):
    up = upstream(_tokenize=tokenized(4), _v1_completions=completion("same", tokens=6))
    answer = await run_generate(up, num_return_sequences=3, **body)
    sent = up.payload("/v1/completions")
    assert (sent["n"], sent["temperature"], sent["top_p"]) == (1, 0.0, 1.0)
    assert answer.generated_texts == ["same", "same", "same"]
    assert answer.num_tokens == 6  # one sequence was generated


async def test_settings_give_the_defaults_a_request_leaves_out():
    settings = Settings(default_max_tokens=77, default_temperature=0.6, default_top_p=0.5)
    up = upstream(_tokenize=tokenized(4), _v1_completions=completion("x"))
    await run_generate(up, settings=settings)
    sent = up.payload("/v1/completions")
    assert (sent["max_tokens"], sent["temperature"], sent["top_p"]) == (77, 0.6, 0.5)


async def test_max_tokens_is_lowered_to_the_room_the_prompt_leaves():
    up = upstream(_tokenize=tokenized(8000, limit=8192), _v1_completions=completion("x"))
    await run_generate(up, max_tokens=1000)
    assert up.payload("/v1/completions")["max_tokens"] == 192


@pytest.mark.parametrize("count", [8192, 9000])
async def test_a_prompt_that_fills_the_context_is_a_400_naming_the_limit(count):
    up = upstream(_tokenize=tokenized(count, limit=8192), _v1_completions=completion("x"))
    with pytest.raises(GatewayError) as caught:
        await run_generate(up, max_tokens=10)
    assert caught.value.status == 400 and caught.value.param == "prompt"
    assert f"{count} tokens" in caught.value.message
    assert "max_model_len" in caught.value.message and "8192" in caught.value.message
    assert up.paths == ["/tokenize"]  # nothing was generated


async def test_an_engine_without_tokenize_still_generates():
    up = upstream(_tokenize=engine_error(404, "Not Found"), _v1_completions=completion("x"))
    answer = await run_generate(up, max_tokens=10)
    assert up.payload("/v1/completions")["max_tokens"] == 10 and answer.generated_text == "x"


# --- engine readiness and errors ---------------------------------------------------------
async def test_an_engine_that_is_not_ready_is_a_503_without_calling_it():
    engine = FakeEngineState(ready=False)
    up = upstream()
    with pytest.raises(GatewayError) as caught:
        await run_generate(up, engine=engine)
    assert (caught.value.status, caught.value.message) == (503, MODEL_NOT_LOADED)
    assert engine.refreshes == 1 and up.calls == []


async def test_an_engine_that_became_ready_since_the_last_look_is_used():
    engine = FakeEngineState(ready=False, ready_after_refresh=True)
    up = upstream(_tokenize=tokenized(4), _v1_completions=completion("x"))
    assert (await run_generate(up, engine=engine)).generated_text == "x"


ERRORS = [
    (EngineUnavailable("the inference engine is unreachable (Connection refused)"), 503,
     MODEL_NOT_LOADED + " (the inference engine is unreachable (Connection refused))"),
    (EngineTimeout(), 504, "Generation timed out: the inference engine did not answer in time"),
    (BadGateway("the inference engine closed the connection"), 502, "the inference engine closed the connection"),
    (engine_error(500, "CUDA error: device-side assert triggered"), 502,
     "Generation failed: CUDA error: device-side assert triggered"),
    (engine_error(503, "engine is sleeping"), 503, MODEL_NOT_LOADED + " (engine is sleeping)"),
    (engine_error(400, "This model's maximum context length is 8192 tokens. However, your prompt contains "
                       "at least 8193 input tokens", param="input_tokens"), 400,
     "prompt is too long for the model's context: This model's maximum context length is 8192 tokens. "
     "However, your prompt contains at least 8193 input tokens"),
    (engine_error(400, "repetition_penalty must be positive", param="repetition_penalty"), 400,
     "The engine refused the request: repetition_penalty must be positive"),
    (engine_error(401, "Unauthorized"), 502, "the inference engine refused the gateway's credentials: Unauthorized"),
    (engine_error(404, "The model `served-model` does not exist."), 503,
     MODEL_NOT_LOADED + " (The model `served-model` does not exist.)"),
]


@pytest.mark.parametrize(("error", "status", "detail"), ERRORS, ids=lambda v: str(v)[:30])
async def test_each_engine_failure_becomes_the_contract_error(error, status, detail):
    up = upstream(_tokenize=tokenized(4), _v1_completions=error)
    with pytest.raises(GatewayError) as caught:
        await run_generate(up)
    assert (caught.value.status, caught.value.message) == (status, detail)


async def test_a_failing_tokenize_maps_like_a_failing_generation():
    up = upstream(_tokenize=EngineTimeout(), _v1_completions=completion("x"))
    with pytest.raises(GatewayError) as caught:
        await run_generate(up)
    assert caught.value.status == 504 and up.paths == ["/tokenize"]


@pytest.mark.parametrize("answer", [
    {"choices": [], "usage": {"completion_tokens": 1}},
    {"choices": [{"index": 0, "text": "x", "finish_reason": "stop"}]},
    {"choices": "nope", "usage": {"completion_tokens": 1}},
])
async def test_a_malformed_engine_answer_is_a_502(answer):
    up = upstream(_tokenize=tokenized(4), _v1_completions=answer)
    with pytest.raises(GatewayError) as caught:
        await run_generate(up)
    assert caught.value.status == 502


async def test_a_tokenize_answer_without_counts_is_a_502():
    up = upstream(_tokenize={"tokens": []}, _v1_completions=completion("x"))
    with pytest.raises(GatewayError) as caught:
        await run_generate(up)
    assert caught.value.status == 502


# --- /chat ---------------------------------------------------------------------------------
CONVERSATION = [
    ChatMessage(role="system", content="You are a coding assistant."),
    ChatMessage(role="user", content="Write a function to reverse a string in Python"),
    ChatMessage(role="assistant", content="def reverse_string(s):\n    return s[::-1]"),
    ChatMessage(role="user", content="Make it recursive instead"),
]


async def run_chat(up: FakeUpstream, messages=CONVERSATION, engine: FakeEngineState | None = None, **body: Any):
    return await service.chat(request=ChatRequest(messages=messages, **body), upstream=up,
                              engine=engine or FakeEngineState(), settings=SETTINGS,
                              context=RequestContext("rid-2"))


async def test_chat_sends_the_messages_to_the_engine_chat_template():
    up = upstream(_tokenize=tokenized(40), _v1_chat_completions=chat_completion("def r(s): ...", tokens=12))
    answer = await run_chat(up, max_tokens=64, temperature=0.0)
    expected = [m.model_dump() for m in CONVERSATION]
    assert up.payload("/tokenize") == {"model": "served-model", "messages": expected, "add_generation_prompt": True}
    sent = up.payload("/v1/chat/completions")
    assert sent["messages"] == expected and "prompt" not in sent
    assert (sent["max_tokens"], sent["temperature"], sent["top_p"]) == (64, 0.0, 1.0)
    assert answer.model_dump() == {"message": {"role": "assistant", "content": "def r(s): ..."},
                                   "model": "served-model", "num_tokens": 12, "finish_reason": "stop"}


async def test_chat_with_no_content_answers_an_empty_message():
    up = upstream(_tokenize=tokenized(40), _v1_chat_completions=chat_completion(None))
    assert (await run_chat(up)).message.content == ""


@pytest.mark.parametrize(("messages", "detail"), [
    ([], "messages must contain at least one message"),
    (CONVERSATION[:3], "Last message must be from user"),
])
async def test_a_conversation_chat_cannot_answer_is_a_400_before_the_engine(messages, detail):
    up = upstream()
    with pytest.raises(GatewayError) as caught:
        await run_chat(up, messages=messages, engine=FakeEngineState(ready=False))
    assert (caught.value.status, caught.value.message) == (400, detail)
    assert up.calls == []


async def test_a_conversation_too_long_for_the_context_names_messages():
    up = upstream(_tokenize=tokenized(9000), _v1_chat_completions=chat_completion("x"))
    with pytest.raises(GatewayError) as caught:
        await run_chat(up)
    assert caught.value.status == 400 and caught.value.param == "messages"
    assert "9000 tokens" in caught.value.message and "8192" in caught.value.message


async def test_chat_engine_failures_map_like_generation():
    up = upstream(_tokenize=tokenized(40), _v1_chat_completions=engine_error(500, "boom"))
    with pytest.raises(GatewayError) as caught:
        await run_chat(up)
    assert (caught.value.status, caught.value.message) == (502, "Generation failed: boom")


# --- the reported model and /model-info ----------------------------------------------------
@pytest.mark.parametrize(("model_path", "reported"), [("", "served-model"), ("stack-2.9", "stack-2.9")])
async def test_answers_report_model_path_when_set(model_path, reported):
    from gateway.engines.state import EngineState

    settings = Settings(model_path=model_path)
    engine = EngineState(settings, upstream=None)
    engine.ready, engine.served_models = True, ["served-model"]  # as after a look at the engine
    up = upstream(_tokenize=tokenized(4), _v1_completions=completion("x"))
    answer = await run_generate(up, engine=engine, settings=settings)
    assert answer.model == reported
    assert up.payload("/v1/completions")["model"] == "served-model"  # the engine gets its own name


def write_config(directory, **fields) -> str:
    (directory / "config.json").write_text(json.dumps({"model_type": "qwen3", **fields}))
    return str(directory)


async def test_model_info_reads_the_dtype_of_the_served_checkpoint(tmp_path):
    engine = FakeEngineState(root=write_config(tmp_path, dtype="bfloat16"))
    info = await service.model_info(engine=engine, settings=Settings(device="cuda"), dtypes=service.CheckpointDtypes())
    assert info.model_dump() == {"model_path": "served-model", "device": "cuda", "dtype": "torch.bfloat16"}


@pytest.mark.parametrize(("fields", "dtype"), [
    ({"torch_dtype": "float16"}, "torch.float16"),  # transformers < 5 spelling
    ({"dtype": "torch.float32"}, "torch.float32"),
    ({}, "auto"),
    ({"dtype": "../../etc"}, "auto"),
])
def test_checkpoint_dtype_spellings(tmp_path, fields, dtype):
    assert service.read_checkpoint_dtype(write_config(tmp_path, **fields)) == dtype


@pytest.mark.parametrize("root", ["Qwen/Qwen3-4B-Instruct-2507", "/nonexistent/checkpoint", ""])
async def test_a_checkpoint_that_is_not_a_readable_local_directory_is_auto(root):
    assert await service.CheckpointDtypes().dtype_of(root or None) == "auto"


def test_a_config_that_is_not_json_is_auto(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    assert service.read_checkpoint_dtype(str(tmp_path)) == "auto"


async def test_the_dtype_is_read_once_and_off_the_event_loop(tmp_path, monkeypatch):
    reads: list[str] = []
    real = service.read_checkpoint_dtype

    def spy(root: str) -> str:
        reads.append(threading.current_thread().name)
        return real(root)

    monkeypatch.setattr(service, "read_checkpoint_dtype", spy)
    dtypes = service.CheckpointDtypes()
    root = write_config(tmp_path, dtype="float16")
    assert await dtypes.dtype_of(root) == "torch.float16"
    write_config(tmp_path, dtype="float32")
    assert await dtypes.dtype_of(root) == "torch.float16"  # cached per checkpoint
    assert len(reads) == 1 and reads[0] != threading.main_thread().name


async def test_model_info_without_a_ready_engine_is_the_contract_503():
    with pytest.raises(GatewayError) as caught:
        await service.model_info(engine=FakeEngineState(ready=False), settings=SETTINGS, dtypes=service.CheckpointDtypes())
    assert (caught.value.status, caught.value.message) == (503, MODEL_NOT_LOADED)
