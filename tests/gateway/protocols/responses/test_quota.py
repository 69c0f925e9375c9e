"""A key's stored responses are bounded, and a continued conversation is held to MAX_BODY_BYTES (issue 29, finding 7).

Through the whole app in front of the fake engine (which streams /v1/responses), sessions and
stored responses in SQLite; the store's own counting is tested on every store in test_records.
"""

from __future__ import annotations

import orjson

from tests.support.gateway import OTHER_KEY, READ_KEY, bearer, serving


def response_id_of(text: str) -> str:
    return next(orjson.loads(line[5:])["response"]["id"] for line in text.splitlines()
                if line.startswith("data:") and '"response"' in line)


async def ask(client, key: str, **extra):
    return await client.post("/v1/responses", headers=bearer(key),
                             json={"model": "fake-model", "input": "hi", "stream": True, **extra})


async def test_a_key_at_its_quota_is_refused_until_it_deletes_and_others_are_not(make_settings):
    settings = make_settings(session_store="sqlite", api_keys=[READ_KEY, OTHER_KEY], responses_max_per_key=2)
    async with serving(settings) as client:
        first, second = await ask(client, READ_KEY), await ask(client, READ_KEY)
        refused = await ask(client, READ_KEY)
        unstored = await ask(client, READ_KEY, store=False)
        other = await ask(client, OTHER_KEY)
        deleted = await client.delete(f"/v1/responses/{response_id_of(first.text)}", headers=bearer(READ_KEY))
        again = await ask(client, READ_KEY)
    assert first.status_code == second.status_code == 200
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "responses_quota_exceeded"
    assert unstored.status_code == 200 and other.status_code == 200  # nothing stored / another key's room
    assert deleted.status_code == 200 and again.status_code == 200


async def test_the_bytes_quota_counts_too(make_settings):
    settings = make_settings(session_store="sqlite", responses_max_bytes_per_key=1024)
    async with serving(settings) as client:
        answers = [await ask(client, "unused", input="x" * 4000) for _ in range(6)]
    statuses = [answer.status_code for answer in answers]
    assert statuses[0] == 200 and statuses[-1] == 429, statuses


async def test_a_conversation_rebuilt_past_max_body_bytes_is_a_413_naming_previous_response_id(make_settings):
    # incompressible-enough input (distinct words) so that each turn adds its size to the conversation
    words = " ".join(f"w{n}" for n in range(60_000))  # ~470 kB
    async with serving(make_settings(session_store="sqlite", max_body_bytes=1024 * 1024)) as client:
        previous, answers = None, []
        for _ in range(4):
            extra = {"previous_response_id": previous} if previous else {}
            answer = await ask(client, "unused", input=words, **extra)
            answers.append(answer)
            if answer.status_code != 200:
                break
            previous = response_id_of(answer.text)
    assert answers[0].status_code == 200
    assert answers[-1].status_code == 413, [a.status_code for a in answers]
    assert answers[-1].json()["error"]["param"] == "previous_response_id"
