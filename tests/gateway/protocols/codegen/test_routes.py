"""The code API's HTTP surface: status codes, body shapes, validation, auth, disconnects.

The whole gateway app (middleware, error handlers) runs in process; the engine is the fake
of test_service, or, for the engine-down case, a real upstream client pointed at a port
where nothing listens.
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import orjson
import pytest

from gateway.app import create_app
from gateway.config import Settings
from gateway.engines.device import reported_device
from gateway.engines.errors import BadGateway, EngineTimeout, EngineUnavailable
from tests.support.asgi_client import post_then_leave
from tests.support.codegen_fakes import (
    MODEL_NOT_LOADED,
    FakeEngineState,
    FakeUpstream,
    chat_completion,
    completion,
    engine_error,
    tokenized,
)
from tests.support.fake_engine import running_fake_engine
from tests.support.servers import free_port

GENERATE_KEYS = {"generated_text", "prompt", "model", "num_tokens", "finish_reason", "generated_texts"}


def codegen_settings(tmp_path, **overrides) -> Settings:
    return Settings(session_store="off", database_url=f"sqlite+aiosqlite:///{tmp_path}/market.db",
                    access_log=False, **overrides)


class Gateway:
    """The app with fake engine state, and an HTTP client for it."""

    def __init__(self, app, client: httpx.AsyncClient) -> None:
        self.app = app
        self.client = client

    def engine_answers(self, **answers) -> FakeUpstream:
        self.app.state.gateway.engines = FakeUpstream(**answers)
        return self.app.state.gateway.engines


@pytest.fixture
async def gateway(tmp_path):
    settings = codegen_settings(tmp_path)
    app = create_app(settings)
    app.state.gateway.engine_state = FakeEngineState()
    app.state.gateway.engines = FakeUpstream()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as client:
        yield Gateway(app, client)


def answering(text: str = "```python\nprint(1)\n```", **kwargs) -> dict:
    return {"_tokenize": tokenized(5), "_v1_completions": completion(text, **kwargs),
            "_v1_chat_completions": chat_completion(text)}


# --- shapes -----------------------------------------------------------------------------------
async def test_generate_answers_the_contract_shape(gateway):
    gateway.engine_answers(**answering(tokens=4, finish="stop"))
    response = await gateway.client.post("/generate", json={"prompt": "def f():", "max_tokens": 16})
    assert response.status_code == 200
    body = response.json()
    assert set(body) == GENERATE_KEYS
    assert body == {"generated_text": "print(1)", "prompt": "def f():", "model": "served-model", "num_tokens": 4,
                    "finish_reason": "stop", "generated_texts": ["print(1)"]}


async def test_generate_raw_answers_the_text_as_generated(gateway):
    gateway.engine_answers(**answering())
    body = (await gateway.client.post("/generate/raw", json={"prompt": "def f():"})).json()
    assert body["generated_text"] == "```python\nprint(1)\n```" and set(body) == GENERATE_KEYS


async def test_chat_answers_the_contract_shape(gateway):
    gateway.engine_answers(**answering("hi"))
    response = await gateway.client.post("/chat", json={"messages": [{"role": "user", "content": "hello"}]})
    assert response.status_code == 200
    assert response.json() == {"message": {"role": "assistant", "content": "hi"}, "model": "served-model",
                               "num_tokens": 5, "finish_reason": "stop"}


async def test_model_info_answers_the_contract_shape(gateway, tmp_path):
    (tmp_path / "config.json").write_text('{"torch_dtype": "float16"}')
    gateway.app.state.gateway.engine_state = FakeEngineState(root=str(tmp_path))
    response = await gateway.client.get("/model-info")
    assert response.status_code == 200
    assert response.json() == {"model_path": "served-model", "device": reported_device(gateway.app.state.gateway.settings),
                               "dtype": "torch.float16"}


@pytest.mark.parametrize(("body", "answer"), [
    ({"prompt": "Here is code:\n```python\nprint('hello world')\n```"}, {"code": "print('hello world')"}),
    ({"prompt": "```python\ndef hello():\n    print(\"world\")\n```"}, {"code": "def hello():\n    print(\"world\")"}),
    ({"prompt": "no fence at all  "}, {"code": "no fence at all"}),
])
async def test_extract_code_answers_exactly_code(gateway, body, answer):
    response = await gateway.client.post("/extract-code", json=body)
    assert response.status_code == 200 and response.json() == answer
    assert gateway.app.state.gateway.engines.calls == []  # no engine needed


async def test_extract_code_lists_blocks_only_when_asked(gateway):
    text = "```js\nx()\n```\n```python\ny()\n```"
    body = (await gateway.client.post("/extract-code", json={"prompt": text, "all_blocks": True, "language": None})).json()
    assert body == {"code": "x()\n\ny()", "blocks": [{"language": "javascript", "code": "x()"},
                                                     {"language": "python", "code": "y()"}]}


@pytest.mark.parametrize(("path", "body"), [
    ("/generate", {"prompt": "def f():"}),
    ("/chat", {"messages": [{"role": "user", "content": "hi"}]}),
])
async def test_time_waiting_for_the_engine_is_not_counted_as_gateway_time(tmp_path, path, body):
    engine_seconds = 0.4
    async with running_fake_engine(response_delay=engine_seconds) as engine:
        app = create_app(codegen_settings(tmp_path, vllm_base_url=engine.base_url))
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as client:
                started = time.perf_counter()
                response = await client.post(path, json=body)
                total_ms = (time.perf_counter() - started) * 1000
    assert response.status_code == 200
    added_ms = float(response.headers["x-gateway-added-ms"])
    # The engine's 400 ms lie inside the client's total but not in the header, whatever the load.
    assert 0 < added_ms <= total_ms - engine_seconds * 1000, (added_ms, total_ms)


# --- invalid input ------------------------------------------------------------------------------
@pytest.mark.parametrize(("path", "body", "field"), [
    ("/generate", {"prompt": ""}, "prompt"),
    ("/generate", {"prompt": "   "}, "prompt"),
    ("/generate", {}, "prompt"),
    ("/generate", {"prompt": "x", "max_tokens": 0}, "max_tokens"),
    ("/generate", {"prompt": "x", "max_tokens": 4097}, "max_tokens"),
    ("/generate/raw", {"prompt": "x", "temperature": 2.5}, "temperature"),
    ("/generate/raw", {"prompt": "x", "top_p": 1.5}, "top_p"),
    ("/generate/raw", {"prompt": "x", "repetition_penalty": 0.5}, "repetition_penalty"),
    ("/generate/raw", {"prompt": "x", "num_return_sequences": 11}, "num_return_sequences"),
    ("/chat", {"messages": [{"role": "robot", "content": "x"}]}, "messages.0.role"),
    ("/chat", {"messages": "hello"}, "messages"),
    ("/extract-code", {"text": "x"}, "prompt"),
    # JSON's lone surrogate escapes parse to no UTF-8 text: refused, not a 500 sending or echoing it
    ("/generate", {"prompt": "def f():\ud800"}, "prompt"),
    ("/generate/raw", {"prompt": "\udfff"}, "prompt"),
    ("/chat", {"messages": [{"role": "user", "content": "hi \ud83d"}]}, "messages.0.content"),
    ("/extract-code", {"prompt": "```python\n\ud800\n```"}, "prompt"),
])
async def test_invalid_input_is_a_422_naming_the_field(gateway, path, body, field):
    # json.dumps escapes a lone surrogate as JSON allows ("\\ud800"), as a JavaScript client sends it
    response = await gateway.client.post(path, content=json.dumps(body),
                                         headers={"Content-Type": "application/json"})
    assert response.status_code == 422
    fields = {".".join(str(p) for p in error["loc"][1:]) for error in response.json()["detail"]}
    assert field in fields
    assert gateway.app.state.gateway.engines.calls == []


@pytest.mark.parametrize(("messages", "detail"), [
    ([], "messages must contain at least one message"),
    ([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}], "Last message must be from user"),
])
async def test_chat_conversation_errors_are_400s(gateway, messages, detail):
    response = await gateway.client.post("/chat", json={"messages": messages})
    assert (response.status_code, response.json()) == (400, {"detail": detail})


# --- engine errors over HTTP ---------------------------------------------------------------------
@pytest.mark.parametrize(("error", "status", "detail_start"), [
    (EngineUnavailable(), 503, MODEL_NOT_LOADED),
    (EngineTimeout(), 504, "Generation timed out"),
    (BadGateway(), 502, "the inference engine sent an invalid response"),
    (engine_error(500, "boom"), 502, "Generation failed: boom"),
    (engine_error(400, "top_k must be -1", param="top_k"), 400, "The engine refused the request: top_k"),
])
@pytest.mark.parametrize("path", ["/generate", "/generate/raw", "/chat"])
async def test_engine_errors_leave_as_detail_with_the_contract_status(gateway, path, error, status, detail_start):
    gateway.engine_answers(_tokenize=tokenized(5), _v1_completions=error, _v1_chat_completions=error)
    body = {"messages": [{"role": "user", "content": "x"}]} if path == "/chat" else {"prompt": "x"}
    response = await gateway.client.post(path, json=body)
    assert response.status_code == status
    assert set(response.json()) == {"detail"} and response.json()["detail"].startswith(detail_start)


@pytest.mark.parametrize(("method", "path", "body"), [
    ("POST", "/generate", {"prompt": "x"}),
    ("POST", "/generate/raw", {"prompt": "x"}),
    ("POST", "/chat", {"messages": [{"role": "user", "content": "x"}]}),
    ("GET", "/model-info", None),
])
async def test_an_engine_that_is_not_ready_is_the_documented_503(gateway, method, path, body):
    gateway.app.state.gateway.engine_state = FakeEngineState(ready=False)
    response = await gateway.client.request(method, path, json=body)
    assert (response.status_code, response.json()) == (503, {"detail": MODEL_NOT_LOADED})


async def test_a_too_long_prompt_is_a_400_naming_the_limit(gateway):
    gateway.engine_answers(_tokenize=tokenized(9000, limit=8192), _v1_completions=completion("x"))
    response = await gateway.client.post("/generate", json={"prompt": "x"})
    assert response.status_code == 400
    assert "9000 tokens" in response.json()["detail"] and "max_model_len) is 8192" in response.json()["detail"]


async def test_the_request_id_reaches_the_engine(gateway):
    upstream = gateway.engine_answers(**answering())
    response = await gateway.client.post("/generate", json={"prompt": "x"}, headers={"x-request-id": "trace-42"})
    assert response.headers["x-request-id"] == "trace-42"
    assert [rid for _, _, rid in upstream.calls] == ["trace-42", "trace-42"]


# --- a real upstream client, with nothing listening ---------------------------------------------------
async def test_with_the_engine_down_every_engine_route_is_a_503_and_health_still_answers(tmp_path):
    settings = codegen_settings(tmp_path, vllm_base_url=f"http://127.0.0.1:{free_port()}", upstream_connect_timeout=1)
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as client:
            generate = await client.post("/generate", json={"prompt": "x"})
            chat = await client.post("/chat", json={"messages": [{"role": "user", "content": "x"}]})
            info = await client.get("/model-info")
            health = await client.get("/health")
            extract = await client.post("/extract-code", json={"prompt": "```\nok\n```"})
    assert (generate.status_code, generate.json()) == (503, {"detail": MODEL_NOT_LOADED})
    assert (chat.status_code, chat.json()) == (503, {"detail": MODEL_NOT_LOADED})
    assert (info.status_code, info.json()) == (503, {"detail": MODEL_NOT_LOADED})
    assert health.status_code == 200 and health.json()["model_loaded"] is False
    assert extract.json() == {"code": "ok"}


# --- auth ---------------------------------------------------------------------------------------
async def test_the_code_api_requires_a_key_when_keys_are_configured(tmp_path):
    settings = codegen_settings(tmp_path, api_keys=["reader-key"])
    app = create_app(settings)
    app.state.gateway.engine_state = FakeEngineState()
    app.state.gateway.engines = FakeUpstream(**answering())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as client:
        anonymous = await client.post("/generate", json={"prompt": "x"})
        wrong = await client.post("/extract-code", json={"prompt": "x"}, headers={"authorization": "Bearer nope"})
        allowed = await client.post("/generate", json={"prompt": "x"}, headers={"authorization": "Bearer reader-key"})
    assert anonymous.status_code == 401 and "detail" in anonymous.json()
    assert wrong.status_code == 401
    assert allowed.status_code == 200


# --- client disconnect ---------------------------------------------------------------------------
class HangingUpstream(FakeUpstream):
    """Measures the prompt, then generates until cancelled."""

    def __init__(self) -> None:
        super().__init__(_tokenize=tokenized(5))
        self.generating = asyncio.Event()
        self.cancelled = asyncio.Event()

    async def post_json(self, path: str, payload: dict, *, request=None, request_id: str | None = None,
                        route=None) -> dict:
        if path == "/tokenize":
            return await super().post_json(path, payload, request=request, request_id=request_id)
        self.generating.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        raise AssertionError("unreachable")


@pytest.mark.parametrize(("path", "body"), [
    ("/generate", {"prompt": "x", "max_tokens": 2000}),
    ("/chat", {"messages": [{"role": "user", "content": "x"}]}),
])
async def test_a_client_that_leaves_cancels_the_engine_request(gateway, path, body):
    upstream = HangingUpstream()
    gateway.app.state.gateway.engines = upstream
    call = post_then_leave(gateway.app, path, orjson.dumps(body))
    await asyncio.wait_for(upstream.generating.wait(), 5)
    call.left.set()
    await asyncio.wait_for(call.task, 5)
    assert upstream.cancelled.is_set()
    assert call.sent[0]["status"] == 499
