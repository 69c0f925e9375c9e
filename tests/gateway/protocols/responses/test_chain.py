"""A previous_response_id conversation is stored once: each response keeps its own input (issue 29, finding 7).

Through the whole app in front of the fake engine: the engine still gets the whole
conversation, in order, while each stored record holds only its own turn's input; a chain lives
as long as its newest response; a turn deleted from the middle is a 404 for its continuations;
a record of an earlier release (its whole conversation, no previous_id) still continues.
"""

from __future__ import annotations

import time

import orjson
import pytest

from gateway.protocols.responses.records.base import StoredResponse
from tests.support.gateway import serving


def response_id_of(text: str) -> str:
    return next(orjson.loads(line[5:])["response"]["id"] for line in text.splitlines()
                if line.startswith("data:") and '"response"' in line)


async def turn(client, text: str, previous: str | None = None):
    extra = {"previous_response_id": previous} if previous else {}
    return await client.post("/v1/responses", json={"model": "fake-model", "input": text, "stream": True, **extra})


def user_texts(items: list) -> list[str]:
    return [item["content"] for item in items if item.get("role") == "user"]


@pytest.mark.parametrize("store", ["sqlite", "memory"])
async def test_each_turn_stores_its_own_input_and_the_engine_gets_the_whole_conversation(make_settings, fake_engine,
                                                                                         store):
    async with serving(make_settings(session_store=store)) as client:
        ids = []
        for n in range(4):
            answer = await turn(client, f"turn {n}", ids[-1] if ids else None)
            assert answer.status_code == 200, answer.text
            ids.append(response_id_of(answer.text))
        sent = fake_engine.received[-1].json["input"]
        records = responses_records(client.app)
        stored = [await records.load_response("local", response_id) for response_id in ids]
    assert user_texts(sent) == ["turn 0", "turn 1", "turn 2", "turn 3"]
    roles = [item.get("role") for item in sent]
    assert roles == ["user", "assistant"] * 3 + ["user"]  # each earlier turn's output after its input
    for n, record in enumerate(stored):
        assert user_texts(orjson.loads(record.history)) == [f"turn {n}"]  # its own turn only
        assert record.previous_id == (ids[n - 1] if n else None)
    assert stored[0].expires_at >= stored[-1].expires_at - 1  # the first lives as long as the newest


async def test_a_deleted_middle_turn_is_a_404_for_its_continuations(make_settings):
    async with serving(make_settings(session_store="sqlite")) as client:
        first = response_id_of((await turn(client, "a")).text)
        second = response_id_of((await turn(client, "b", first)).text)
        third = response_id_of((await turn(client, "c", second)).text)
        assert (await client.delete(f"/v1/responses/{second}")).status_code == 200
        broken = await turn(client, "d", third)
    assert broken.status_code == 404 and broken.json()["error"]["param"] == "previous_response_id"
    assert second in broken.json()["error"]["message"]


async def test_a_record_of_an_earlier_release_still_continues(make_settings, fake_engine):
    async with serving(make_settings(session_store="sqlite")) as client:
        records = responses_records(client.app)
        now = time.time()
        whole = [{"type": "message", "role": "user", "content": "old 0"},
                 {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "r0"}]},
                 {"type": "message", "role": "user", "content": "old 1"}]
        await records.save_response(StoredResponse(
            owner="local", response_id="resp_old", status="completed", background=False,
            body=orjson.dumps({"id": "resp_old", "status": "completed", "output": []}), history=orjson.dumps(whole),
            root="resp_old", created_at=now, expires_at=now + 60))
        answer = await turn(client, "new", "resp_old")
    assert answer.status_code == 200, answer.text
    assert user_texts(fake_engine.received[-1].json["input"]) == ["old 0", "old 1", "new"]


def responses_records(app):
    for route in app.raw_routes:
        owner = getattr(route.handler, "__self__", None)
        if owner is not None and hasattr(owner, "records"):
            return owner.records
    raise AssertionError("no Responses API among the raw routes")
