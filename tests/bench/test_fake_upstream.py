"""The fake upstream answers in vLLM 0.32's shapes (copied from the real engine)."""

from __future__ import annotations

import aiohttp
import orjson
import pytest

from bench.fake_upstream import FakeEngineConfig, serve
from bench.sse import SseCounter


@pytest.fixture
async def upstream_url():
    server = await serve(host="127.0.0.1", port=0, config=FakeEngineConfig(model="m"))
    yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    server.close()
    await server.wait_closed()


@pytest.fixture
async def client(upstream_url):
    async with aiohttp.ClientSession(base_url=upstream_url) as session:
        yield session


def _frames(body: bytes) -> list[bytes]:
    assert body.endswith(b"data: [DONE]\n\n")
    frames = body.split(b"\n\n")[:-2]
    assert all(frame.startswith(b"data: {") for frame in frames)
    return [frame[len(b"data: "):] for frame in frames]


async def test_health_and_models(client):
    async with client.get("/health") as response:
        assert response.status == 200
    async with client.get("/v1/models") as response:
        models = await response.json()
    assert models["object"] == "list"
    assert [(m["id"], m["owned_by"], m["max_model_len"]) for m in models["data"]] == [
        ("m", "vllm", 8192)]


async def test_chat_non_streaming_has_vllm_fields_in_order_and_usage(client):
    body = {"model": "m", "messages": [{"role": "user", "content": "a b c"}], "max_tokens": 5}
    async with client.post("/v1/chat/completions", json=body,
                           headers={"X-Request-Id": "req-7"}) as response:
        assert response.status == 200
        raw = await response.read()
    payload = orjson.loads(raw)
    assert list(payload) == ["id", "object", "created", "model", "choices", "service_tier",
                             "system_fingerprint", "usage", "prompt_logprobs",
                             "prompt_token_ids", "prompt_text", "kv_transfer_params",
                             "ec_transfer_params", "metrics"]
    assert payload["id"] == "chatcmpl-req-7"
    choice = payload["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert choice["finish_reason"] == "length"
    assert payload["usage"]["completion_tokens"] == 5
    assert payload["usage"]["total_tokens"] == payload["usage"]["prompt_tokens"] + 5


async def test_chat_stream_role_then_content_then_usage_then_done(client):
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 3,
            "stream": True, "n": 2, "stream_options": {"include_usage": True}}
    async with client.post("/v1/chat/completions", json=body) as response:
        assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
        raw = await response.read()
    chunks = [orjson.loads(frame) for frame in _frames(raw)]
    assert [c["choices"][0]["delta"] for c in chunks[:2]] == [
        {"role": "assistant", "content": ""}] * 2
    content = chunks[2:-1]
    assert [c["choices"][0]["index"] for c in content] == [0, 1] * 3
    assert [c["choices"][0]["finish_reason"] for c in content] == [None] * 4 + ["length"] * 2
    assert all("system_fingerprint" not in c for c in content)  # it moves to the usage chunk
    usage = chunks[-1]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 6
    assert usage["system_fingerprint"].startswith("vllm-")
    assert len({c["id"] for c in chunks}) == 1
    counter = SseCounter()
    counter.feed(raw)
    assert counter.content_events == 6 and counter.done


async def test_completions_stream_without_usage_ends_with_fingerprint(client):
    body = {"model": "m", "prompt": "hi", "max_tokens": 2, "stream": True}
    async with client.post("/v1/completions", json=body) as response:
        chunks = [orjson.loads(frame) for frame in _frames(await response.read())]
    assert [c["object"] for c in chunks] == ["text_completion"] * 2
    assert chunks[0]["id"].startswith("cmpl-")
    assert list(chunks[0]["choices"][0]) == ["index", "text", "logprobs", "finish_reason",
                                             "stop_reason", "prompt_token_ids", "token_ids"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert "system_fingerprint" in chunks[-1] and "system_fingerprint" not in chunks[0]


async def test_unknown_model_and_bad_json_get_vllm_error_envelopes(client):
    async with client.post("/v1/chat/completions",
                           json={"model": "other", "messages": []}) as response:
        assert response.status == 404
        error = (await response.json())["error"]
    assert error["type"] == "NotFoundError" and error["param"] == "model"
    assert "Valid aliases: m" in error["message"]
    async with client.post("/v1/completions", data=b"{bad",
                           headers={"content-type": "application/json"}) as response:
        assert response.status == 400
        assert (await response.json())["error"]["code"] == 400


async def test_keep_alive_connection_serves_requests_in_order(upstream_url):
    stream = {"model": "m", "prompt": "x", "max_tokens": 4, "stream": True}
    plain = {"model": "m", "prompt": "x", "max_tokens": 1, "stream": False}
    async with aiohttp.ClientSession(base_url=upstream_url,
                                     connector=aiohttp.TCPConnector(limit=1)) as one_connection:
        for body in (stream, plain, stream):
            async with one_connection.post("/v1/completions", json=body) as response:
                raw = await response.read()
            if body["stream"]:
                counter = SseCounter()
                counter.feed(raw)
                assert counter.content_events == 4 and counter.done
            else:
                assert orjson.loads(raw)["usage"]["completion_tokens"] == 1
