"""A request's JSON body and a non-streamed answer are each parsed once by the gateway.

The protocol parses the body and keeps the result on the request's context for the limits
(``relay.metering``) and tracing; the non-streamed relay decodes the answer's usage once and
settles the limits and the ledger with it. Counted here as the gateway's own ``orjson.loads``
calls (the fake engine's, in the same process, are not counted), for a key with limits and a
models list, the kind of key whose admission reads the body.
"""

from __future__ import annotations

import sys

import orjson
import pytest

from tests.support.gateway import READ_KEY, WRITE_KEY, bearer, serving

ADMIN = bearer(WRITE_KEY)


@pytest.fixture
async def gateway(make_settings):
    async with serving(make_settings(api_keys=[READ_KEY], admin_api_keys=[WRITE_KEY],
                                     usage_flush_seconds=300)) as client:
        yield client


@pytest.fixture
def parsed(monkeypatch) -> list[bytes]:
    """What the gateway's own code passes to ``orjson.loads`` from now on."""
    seen: list[bytes] = []
    loads = orjson.loads

    def counting(data, *args, **kwargs):
        if sys._getframe(1).f_globals.get("__name__", "").startswith("gateway."):
            seen.append(bytes(data) if not isinstance(data, str) else data.encode())
        return loads(data, *args, **kwargs)

    monkeypatch.setattr(orjson, "loads", counting)
    return seen


async def limited_key(gateway, model: str) -> str:
    answer = await gateway.post("/admin/keys", json={"name": "app", "models": [model], "limits": {"rpm": 1000}},
                                headers=ADMIN)
    assert answer.status_code == 201, answer.text
    return answer.json()["key"]


async def model_of(gateway) -> str:
    return (await gateway.get("/v1/models", headers=bearer(READ_KEY))).json()["data"][0]["id"]


def post(gateway, path: str, body: bytes, key: str):
    return gateway.post(path, content=body, headers={**bearer(key), "content-type": "application/json"})


async def test_a_non_streamed_chat_parses_its_body_once_and_its_answer_at_most_once(gateway, parsed):
    model = await model_of(gateway)
    key = await limited_key(gateway, model)
    body = orjson.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    parsed.clear()
    answer = await post(gateway, "/v1/chat/completions", body, key)
    assert answer.status_code == 200, answer.text
    assert parsed.count(body) == 1  # the protocol's parse; the limits read it from the request
    assert parsed.count(answer.content) <= 1  # its usage decoded once: metrics, limits and the ledger
    # ...and the ledger got that usage and the model, as before.
    await gateway.app.state.tenancy.ledger.flush()
    rows = (await gateway.get("/v1/usage?group_by=model", headers=bearer(key))).json()["data"]
    usage = answer.json()["usage"]
    assert [(row["model"], row["requests"], row["prompt_tokens"], row["completion_tokens"]) for row in rows] \
        == [(model, 1, usage["prompt_tokens"], usage["completion_tokens"])]


async def test_a_streamed_chat_parses_its_body_once(gateway, parsed, fake_engine):
    model = await model_of(gateway)
    key = await limited_key(gateway, model)
    body = orjson.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                         "stream": True})
    parsed.clear()
    answer = await post(gateway, "/v1/chat/completions", body, key)
    assert answer.status_code == 200 and b"[DONE]" in answer.content
    sent = fake_engine.last.body  # written again by the gateway (it asks for the usage)
    assert sent != body
    assert parsed.count(body) == 1 and parsed.count(sent) == 0  # the stream's admission reused the parse


async def test_a_messages_stream_parses_its_body_once(gateway, parsed, fake_engine):
    model = await model_of(gateway)
    key = await limited_key(gateway, model)
    body = orjson.dumps({"model": model, "max_tokens": 4, "stream": True,
                         "messages": [{"role": "user", "content": "hi"}]})
    parsed.clear()
    answer = await post(gateway, "/v1/messages", body, key)
    assert answer.status_code == 200, answer.text
    assert fake_engine.last.body == body  # relayed as written
    assert parsed.count(body) == 1
