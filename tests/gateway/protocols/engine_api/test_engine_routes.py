"""vLLM's other routes through the gateway, against the real engine: relayed, admin-only, refused."""

from __future__ import annotations

import httpx
import openai
import pytest

from gateway.protocols.common import table
from tests.gateway.protocols.conftest import ADMIN_KEY, KEY_A, engine_post, headers

pytestmark = [pytest.mark.integration, pytest.mark.engine]


def post(url: str, path: str, body: dict, key: str = KEY_A) -> httpx.Response:
    return httpx.post(url + path, json=body, headers=headers(key), timeout=60)


def test_tokenize_then_detokenize_round_trip(gateway_url, vllm_engine):
    tokens = post(gateway_url, "/tokenize", {"model": "stack-2.9", "prompt": "Hello there"}).json()
    direct = engine_post(vllm_engine, "/tokenize", {"model": vllm_engine.model, "prompt": "Hello there"}).json()
    assert tokens["tokens"] == direct["tokens"] and tokens["count"] == len(tokens["tokens"]) > 0
    text = post(gateway_url, "/detokenize", {"model": "stack-2.9", "tokens": tokens["tokens"]}).json()
    assert text == {"prompt": "Hello there"}


def test_tokenized_conversation_is_the_prompt_a_chat_completion_uses(gateway_url, vllm_engine):
    messages = [{"role": "user", "content": "Hello there"}]
    counted = post(gateway_url, "/tokenize", {"messages": messages, "add_generation_prompt": True}).json()
    sdk = openai.OpenAI(base_url=gateway_url + "/v1", api_key=KEY_A, max_retries=0)
    reply = sdk.chat.completions.create(model=vllm_engine.model, messages=messages, max_tokens=1)
    assert counted["count"] == reply.usage.prompt_tokens


def test_embeddings_on_a_generative_model_answer_the_engines_404(gateway_url, vllm_engine):
    sdk = openai.OpenAI(base_url=gateway_url + "/v1", api_key=KEY_A, max_retries=0)
    with pytest.raises(openai.NotFoundError) as refused:
        sdk.embeddings.create(model=vllm_engine.model, input="hello")
    assert refused.value.body["message"].startswith("Not Found")  # the engine's own message, explained
    assert engine_post(vllm_engine, "/v1/embeddings", {"model": vllm_engine.model, "input": "x"}).status_code == 404
    no_v1 = post(gateway_url, "/embeddings", {"input": "hello"})
    assert no_v1.status_code == 404 and no_v1.json()["error"]["code"] == "route_not_served"


@pytest.mark.parametrize("path", ["/v1/rerank", "/rerank", "/v1/score", "/score", "/pooling", "/classify"])
def test_pooling_routes_relay_the_engines_answer(gateway_url, vllm_engine, path):
    body = {"model": "stack-2.9", "query": "a", "documents": ["b"], "text_1": "a", "text_2": "b", "input": "x"}
    answer = post(gateway_url, path, body)
    direct = engine_post(vllm_engine, path, {**body, "model": vllm_engine.model})
    assert answer.status_code == direct.status_code == 404
    assert answer.json()["error"]["type"] == "invalid_request_error"  # OpenAI's envelope: its type for a 404


@pytest.mark.parametrize("path", ["/v1/audio/transcriptions", "/v1/audio/translations"])
def test_audio_routes_take_multipart_and_relay_the_engines_answer(gateway_url, path):
    files = {"file": ("a.wav", b"RIFF\x00\x00\x00\x00WAVE", "audio/wav")}
    answer = httpx.post(gateway_url + path, data={"model": "stack-2.9"}, files=files, headers=headers(), timeout=30)
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "route_not_served"
    unknown = httpx.post(gateway_url + path, data={"model": "nope"}, files=files, headers=headers(), timeout=30)
    assert unknown.status_code == 404 and unknown.json()["error"]["param"] == "model"
    not_multipart = post(gateway_url, path, {"model": "stack-2.9"})
    assert not_multipart.status_code == 400 and not_multipart.json()["error"]["param"] == "content-type"


REFUSED = [row for row in table.ROUTES if row.kind == table.REFUSED]


@pytest.mark.parametrize("row", REFUSED, ids=lambda row: row.path)
def test_every_operational_route_is_a_404_with_any_key(gateway_url, row):
    path = row.path.replace("{adapter_name}", "lora-1")
    for key in (KEY_A, ADMIN_KEY):
        for method in {row.method, "GET", "POST"}:
            answer = httpx.request(method, gateway_url + path, headers=headers(key), json={}, timeout=10)
            assert answer.status_code == 404, (method, path, answer.text)
            # (GET /v1/responses/render is the gateway's lookup of a response named "render": also a 404)
            assert answer.json()["error"]["code"] in ("route_not_exposed", "response_not_found")


@pytest.mark.parametrize("path", ["/reset_prefix_cache", "/v1/load_lora_adapter", "/v1/unload_lora_adapter"])
def test_admin_routes_are_refused_to_client_keys_and_relayed_for_admin_keys(gateway_url, vllm_engine, path):
    refused = post(gateway_url, path, {"lora_name": "x", "lora_path": "/nowhere"})
    assert refused.status_code == 403 and refused.json()["error"]["type"] == "permission_error"
    relayed = post(gateway_url, path, {"lora_name": "x", "lora_path": "/nowhere"}, key=ADMIN_KEY)
    direct = engine_post(vllm_engine, path, {"lora_name": "x", "lora_path": "/nowhere"})
    # This engine runs without dev mode and runtime LoRA updating: its own answer is a route 404.
    assert relayed.status_code == direct.status_code == 404
    assert "dev mode" in relayed.json()["error"]["message"]


def test_an_admin_route_not_enabled_is_refused_like_the_rest(gateway_url):
    answer = post(gateway_url, "/reset_mm_cache", {}, key=ADMIN_KEY)  # admin-capable, not in ENGINE_ADMIN_ROUTES
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "route_not_exposed"


def test_models_retrieve_works_for_served_names_and_aliases(gateway_url, vllm_engine):
    sdk = openai.OpenAI(base_url=gateway_url + "/v1", api_key=KEY_A, max_retries=0)
    assert sdk.models.retrieve(vllm_engine.model).id == vllm_engine.model
    assert sdk.models.retrieve("stack-2.9").parent == vllm_engine.model
    with pytest.raises(openai.NotFoundError):
        sdk.models.retrieve("nope")


def test_the_seed_documents_sdk_snippet_works_as_written(gateway_url):
    # The Stack 2.9 document's example, character for character but for the address (no /v1):
    # the SDK then posts to /completions.
    snippet = '''from openai import OpenAI

client = OpenAI(api_key="not-needed", base_url="http://localhost:8000")
response = client.completions.create(
    model="stack-2.9",
    prompt="def fibonacci(n):",
    max_tokens=100,
)
print(response.choices[0].text)
'''
    namespace: dict = {}
    code = snippet.replace("http://localhost:8000", gateway_url).replace('api_key="not-needed"', f'api_key="{KEY_A}"')
    exec(compile(code, "<seed snippet>", "exec"), namespace)
    response = namespace["response"]
    assert response.object == "text_completion" and response.choices[0].text
    assert response.usage.completion_tokens == 100 or response.choices[0].finish_reason == "stop"


@pytest.mark.parametrize(("body", "param"), [
    (b'{"prompt": "x"', "body"),
    (b'{"prompt": "x", "add_special_tokens": 1e999}', "add_special_tokens"),
    (b'{"tokens": [1, 100000000000000000000]}', "tokens.1"),
    (b'{"prompt": 5}', "body.prompt"),                     # the engine's own 400
    (b'{"prompt": "x", "model": 3}', "model"),
])
def test_bad_input_on_relayed_routes_is_a_400_naming_the_field(gateway_url, body, param):
    path = "/detokenize" if b"tokens" in body else "/tokenize"
    answer = httpx.post(gateway_url + path, content=body, headers={**headers(), "content-type": "application/json"},
                        timeout=10)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == param
