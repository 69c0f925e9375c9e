"""AI search against the real vLLM engine (the embedded random-weight Qwen3: valid JSON, nonsense values).

Two engines, because of how guided decoding treats whitespace:
- the session's engine runs as ``launch_vllm.sh`` starts it, where xgrammar lets a model put
  any whitespace between JSON tokens. This random model then writes nothing but whitespace
  until ``max_tokens`` (measured: 300 of 300 tokens), so the answer is cut off and the search
  must fall back to the rules, saying so;
- a second engine started here with ``--structured-outputs-config
  '{"backend": "xgrammar", "disable_any_whitespace": true}'`` (compact JSON) finishes its
  answer in about 200 tokens: schema-valid JSON whose values are nonsense (invented words,
  prices of Rp 8, a radius nobody asked for), which the search must reject field by field.
What the engine returned is checked against the schema with ``jsonschema``, independently of
the gateway's own validation. (A real Qwen model writes sensible values: docs/marketplace.md.)
``STACK_TEST_COMPACT_ENGINE_URL`` reuses a running engine with that setting instead.
"""

from __future__ import annotations

import json
import os

import jsonschema
import pytest

from marketplace.search import extraction
from tests.marketplace.support import READ, add_product, add_supplier, make_settings, running_app
from tests.support.engine import EMBEDDED_SERVED_NAME, EngineHandle, _LaunchedEngine

pytestmark = [pytest.mark.integration, pytest.mark.engine]

COMPACT_JSON = ("--structured-outputs-config", '{"backend": "xgrammar", "disable_any_whitespace": true}')
QUERY = "laptop gaming di bandung di bawah 20 juta"
BANDUNG = (-6.9175, 107.6191)


@pytest.fixture(scope="module")
def compact_json_engine(tmp_path_factory):
    url = os.environ.get("STACK_TEST_COMPACT_ENGINE_URL")
    if url:
        yield EngineHandle(base_url=url.rstrip("/"), api_key=os.environ.get("STACK_TEST_COMPACT_ENGINE_API_KEY"),
                           model=os.environ.get("STACK_TEST_ENGINE_MODEL", EMBEDDED_SERVED_NAME))
        return
    with _LaunchedEngine(tmp_path_factory.mktemp("compact-json-engine"), extra_args=COMPACT_JSON) as engine:
        yield engine


async def search_with(engine: EngineHandle, tmp_path) -> tuple[dict, list[dict]]:
    """One AI search through the gateway in front of ``engine``; the answer and what the engine replied."""
    settings = make_settings(database_url=f"sqlite+aiosqlite:///{tmp_path}/ai.db", vllm_base_url=engine.base_url,
                             vllm_api_key=engine.api_key)
    async with running_app(settings) as client:
        upstream = client.app.state.gateway.engines  # the engine client every gateway.api call goes through
        replies: list[dict] = []
        post_json = upstream.post_json

        async def recording_post_json(path, payload, **kwargs):
            response = await post_json(path, payload, **kwargs)
            replies.append(response)
            return response

        upstream.post_json = recording_post_json
        client.app.state.marketplace.settings = client.app.state.marketplace.settings.model_copy(
            update={"ai_search_timeout_seconds": 60})  # a busy CI machine: wait for the answer
        supplier = await add_supplier(client, lat=BANDUNG[0], lng=BANDUNG[1])
        gaming = await add_product(client, supplier_id=supplier["id"], name="Laptop Gaming ROG", price=18_000_000,
                                   category="laptop")
        await add_product(client, supplier_id=supplier["id"], name="Laptop Gaming Legion", price=25_000_000,
                          category="laptop")
        response = await client.post("/api/products/ai-search", json={"query": QUERY}, headers=READ)
        assert response.status_code == 200, response.text
        body = response.json()
    assert [hit["product"]["id"] for hit in body["results"]] == [gaming["id"]]
    return body, replies


RULES_DECIDE = {"terms": "rules", "category": "rules", "max_price": "rules", "place": "rules",
                "location": "rules", "radius_km": "default", "in_stock": "default", "tags": "rules"}


async def test_a_compact_json_engine_answers_within_the_schema(compact_json_engine, tmp_path):
    body, replies = await search_with(compact_json_engine, tmp_path)
    [reply] = replies
    assert reply["choices"][0]["finish_reason"] == "stop"
    content = json.loads(reply["choices"][0]["message"]["content"])
    jsonschema.validate(content, extraction.SCHEMA)  # the engine's own guided decoding kept to it

    assert body["engine"]["status"] == "answered"
    assert body["engine"]["model"] == compact_json_engine.model
    # Nonsense values never reach the search: each is rejected with its reason, or the rules had it.
    used = {name for name, source in body["sources"].items() if source == "model"}
    for name, value in content.items():
        if value not in (None, []) and name not in used:
            assert name in body["engine"]["rejected"], (name, value, body["engine"])
    assert body["parsed"]["max_price"] == 20_000_000 and body["sources"]["max_price"] == "rules"
    assert body["parsed"]["place"]["name"] == "Bandung" and body["sources"]["place"] == "rules"


async def test_an_engine_that_pads_with_whitespace_falls_back_to_the_rules(vllm_engine, tmp_path):
    body, replies = await search_with(vllm_engine, tmp_path)
    [reply] = replies
    assert reply["choices"][0]["finish_reason"] == "length"
    assert reply["choices"][0]["message"]["content"].lstrip().startswith("{")  # guided, but unfinished
    assert body["engine"]["status"] == "unparseable"
    assert "cut off" in body["engine"]["detail"]
    assert {name: source for name, source in body["sources"].items() if source} == RULES_DECIDE
