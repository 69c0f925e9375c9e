"""The usage ledger records who a request was for, under the end user's label, for every kind of key.

A plain ``API_KEYS`` key and a database key alike: OpenAI's ``user`` and Anthropic's
``metadata.user_id`` put the request's usage on that end user's row (``group_by=user``), under
the HMAC label the limits use (``relay.end_users``), never the id itself; ``user=<id>`` finds
one end user's rows. A key without end-user limits is never refused for a long ``user``.
"""

from __future__ import annotations

import pytest

from tests.support.bodies import chat_body, stream_body
from tests.support.gateway import READ_KEY, WRITE_KEY, bearer, serving

ADMIN = bearer(WRITE_KEY)
ALICE, BOB = "alice@example.com", "bob@example.com"


@pytest.fixture
async def gateway(make_settings):
    async with serving(make_settings(api_keys=[READ_KEY], admin_api_keys=[WRITE_KEY],
                                     usage_flush_seconds=300)) as client:
        yield client


async def database_key(gateway) -> str:
    answer = await gateway.post("/admin/keys", json={"name": "app", "role": "app"}, headers=ADMIN)
    assert answer.status_code == 201, answer.text
    return answer.json()["key"]


async def usage(gateway, query: str) -> list[dict]:
    await gateway.app.state.tenancy.ledger.flush()
    answer = await gateway.get(f"/admin/usage?{query}", headers=ADMIN)
    assert answer.status_code == 200, answer.text
    assert ALICE not in answer.text and BOB not in answer.text  # labels only, never the id
    return answer.json()["data"]


async def test_an_env_key_and_a_database_key_both_record_the_end_user_under_its_label(gateway):
    db_key = await database_key(gateway)
    for key in (READ_KEY, db_key):
        for body in (chat_body(user=ALICE), stream_body(max_tokens=4, user=ALICE), chat_body(user=BOB), chat_body()):
            answer = await gateway.post("/v1/chat/completions", json=body, headers=bearer(key))
            assert answer.status_code == 200, answer.text
        messages = {"model": "fake-model", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}],
                    "metadata": {"user_id": ALICE}, "stream": True}  # (the fake streams Messages only)
        answer = await gateway.post("/v1/messages", json=messages, headers=bearer(key))
        assert answer.status_code == 200, answer.text
    by_user = {row["end_user"]: row["requests"] for row in await usage(gateway, "group_by=user")}
    assert sorted(by_user.values()) == [2, 2, 6]  # none, Bob, Alice (chat, stream, messages) per key
    assert by_user.get(None) == 2  # the requests that named nobody
    labels = [label for label in by_user if label is not None]
    assert all(len(label) == 16 and int(label, 16) >= 0 for label in labels)

    alice = await usage(gateway, f"user={ALICE}&group_by=key")
    assert sorted(row["requests"] for row in alice) == [3, 3]  # both keys, the env one too
    bob = await usage(gateway, f"user={BOB}&group_by=user")
    assert [row["requests"] for row in bob] == [2]
    own = await gateway.get(f"/v1/usage?user={ALICE}&group_by=route", headers=bearer(db_key))
    assert sorted(row["requests"] for row in own.json()["data"]) == [1, 2]  # messages; chat (plain + stream)


async def test_a_long_user_on_a_key_without_end_user_limits_is_recorded_not_refused(gateway):
    long_id = "u" * 1000
    answer = await gateway.post("/v1/chat/completions", json=chat_body(user=long_id), headers=bearer(READ_KEY))
    assert answer.status_code == 200
    (row,) = await usage(gateway, f"user={long_id}&group_by=user")
    assert row["requests"] == 1 and long_id not in row["end_user"]
