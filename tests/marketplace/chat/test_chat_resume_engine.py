"""A streamed /api/chat on the real vLLM engine, dropped mid-way and resumed with Last-Event-ID,
with the sessions in the marketplace's database (SQLite here, PostgreSQL in the twin module).

The expected answer is the engine's own: the payload the marketplace sent, streamed straight
to the engine again afterwards (deterministic at temperature 0). The gateway runs under uvicorn
so the dropped connection really drops.
"""

from __future__ import annotations

import httpx
import orjson
import pytest

from gateway.api import Gateway
from gateway.app import create_app
from tests.marketplace.support import APP, add_product, add_supplier, add_user, database_url, make_settings
from tests.support.servers import serve_uvicorn
from tests.support.sse_client import content_of, fresh_client, parse_sse, read_stream
from tests.support.waiting import until

__all__ = ["database_url"]

pytestmark = [pytest.mark.integration, pytest.mark.engine]

MAX_TOKENS = 96  # long enough for the first client to leave well before the end
RECEIVED_BEFORE_DROP = 4


@pytest.fixture
def sent_payloads(monkeypatch) -> list[dict]:
    """The payloads features stream through ``Gateway.stream_chat_completion`` (new generations only)."""
    sent: list[dict] = []
    original = Gateway.stream_chat_completion

    async def recording(self, request, payload, **options):
        if options.get("resume_from") is None:
            sent.append(orjson.loads(orjson.dumps(payload)))
        return await original(self, request, payload, **options)

    monkeypatch.setattr(Gateway, "stream_chat_completion", recording)
    return sent


async def engine_stream_text(vllm_engine, payload: dict) -> str:
    async with httpx.AsyncClient(base_url=vllm_engine.base_url, headers=vllm_engine.headers, timeout=300) as http:
        response = await http.post("/v1/chat/completions", json={**payload, "stream": True})
    assert response.status_code == 200, response.text
    events, _ = parse_sse(response.text.splitlines())
    return content_of(events)


def generation_of(app, session_id: str):
    found = [g for key, g in list(app.state.sessions._generations.items()) if key.session_id == session_id]
    assert len(found) == 1, found
    return found[0]


async def test_a_dropped_stream_resumes_on_the_engine_and_only_its_user_may_resume_it(
        database_url, vllm_engine, sent_payloads):
    store = "postgres" if database_url.startswith("postgresql") else "sqlite"
    settings = make_settings(database_url=database_url, vllm_base_url=vllm_engine.base_url,
                             vllm_api_key=vllm_engine.api_key, session_store=store,
                             default_max_tokens=MAX_TOKENS, default_temperature=0.0)
    app = create_app(settings)
    async with serve_uvicorn(app) as base_url, fresh_client(base_url, timeout=300) as client:
        supplier = await add_supplier(client, lat=-7.2575, lng=112.7521)
        await add_product(client, supplier_id=supplier["id"], name="Sambal Bawang", category="makanan")
        ani = await add_user(client, email="ani@example.com")
        citra = await add_user(client, email="citra@example.com")
        tokens = {}
        for user in (ani, citra):
            minted = await client.post(f"/api/users/{user['id']}/tokens", json={}, headers=APP)
            assert minted.status_code == 201, minted.text
            tokens[user["email"]] = {"Authorization": f"Bearer {minted.json()['token']}"}
        body = {"message": "sambal bawang di Surabaya", "session_id": "sambal", "stream": True}

        first = await read_stream(client, "POST", "/api/chat", json=body, headers=tokens["ani@example.com"],
                                  stop_after=RECEIVED_BEFORE_DROP)
        assert first.status == 200, first.body
        conversation_id = first.headers["x-conversation-id"]
        assert first.session_id == conversation_id and first.last_id == f"{conversation_id}:{RECEIVED_BEFORE_DROP - 1}"
        generation = generation_of(app, conversation_id)
        await until(lambda: generation.consumers == 0, what="the gateway noticed the client left")

        # Citra, of the same app, cannot pick up Ani's stream, by either route.
        resume = {"Last-Event-ID": first.last_id}
        refused = await client.post("/api/chat", json=body, headers={**tokens["citra@example.com"], **resume})
        assert refused.status_code == 404, refused.text
        events = f"/api/conversations/{conversation_id}/events"
        assert (await client.get(events, headers={**tokens["citra@example.com"], **resume})).status_code == 404

        rest = await read_stream(client, "POST", "/api/chat", json=body,
                                 headers={**tokens["ani@example.com"], **resume}, timeout=300)
        assert rest.status == 200, rest.body
        assert first.indices + rest.indices == list(range(len(first.events) + len(rest.events)))
        assert first.dones == 0 and rest.dones == 1 and rest.events[-1].done and rest.content
        answer = first.content + rest.content

        await until(lambda: not generation.live, timeout=120, what="the generation ended")
        assert generation.how == "completed"
        [payload] = sent_payloads
        assert answer == await engine_stream_text(vllm_engine, payload)  # nothing repeated, nothing missing

        async def stored() -> list[tuple[str, str]]:
            response = await client.get(f"/api/conversations/{conversation_id}", headers=tokens["ani@example.com"])
            assert response.status_code == 200, response.text
            return [(m["role"], m["content"]) for m in response.json()["messages"]]

        await until(lambda: _two(stored), timeout=30, interval=0.05, what="the exchange stored")
        assert await stored() == [("user", "sambal bawang di Surabaya"), ("assistant", answer)]


async def _two(stored) -> bool:
    return len(await stored()) == 2
