"""Webhooks: registered by an admin, signed (verified by the openai SDK's own verifier), retried, refused by the allow-list."""

from __future__ import annotations

import io
import socket

import openai
import orjson
import pytest

from gateway.http.auth import KeyRing
from gateway.webhooks import signing
from gateway.webhooks.destinations import CheckingResolver, DestinationRefused, address_allowed, parse_networks
from tests.gateway.batches.conftest import admin, chat_line, jobs_ready, wait_status
from tests.support.gateway import READ_KEY, running_gateway
from tests.support.waiting import until
from tests.support.webhook_receiver import receiving


def key_id_of(settings) -> str:
    """The key id the gateway gives READ_KEY: what an admin registers endpoints for."""
    return KeyRing.from_settings(settings).authenticate(READ_KEY).key_id


async def run_batch(base_url: str, count: int = 2) -> str:
    async with openai.AsyncOpenAI(base_url=base_url + "/v1", api_key=READ_KEY, max_retries=0) as client:
        lines = b"".join(orjson.dumps(chat_line(f"r{n}", "fake-model")) + b"\n" for n in range(count))
        file = await client.files.create(file=("in.jsonl", io.BytesIO(lines)), purpose="batch")
        batch = await client.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions",
                                            completion_window="24h")
        await wait_status(lambda: client.batches.retrieve(batch.id), ("completed",))
        return batch.id


async def test_signed_event_retried_after_a_500_with_the_same_id(jobs_settings):
    settings = jobs_settings()
    async with receiving(statuses=[500]) as receiver, running_gateway(settings) as (base_url, _):
        await jobs_ready(base_url)
        created = await admin(base_url, "POST", "/admin/webhooks",
                              json={"url": receiver.url, "key_id": key_id_of(settings),
                                    "events": ["batch.completed"]})
        assert created.status_code == 200, created.text
        secret = created.json()["secret"]
        assert secret.startswith("whsec_")
        assert "secret" not in (await admin(base_url, "GET", f"/admin/webhooks/{created.json()['id']}")).json()
        batch_id = await run_batch(base_url)
        first, second = await receiver.wait_for(2, timeout=30)
        assert first.headers["webhook-id"] == second.headers["webhook-id"] and first.body == second.body
        verifier = openai.OpenAI(api_key="unused", webhook_secret=secret)
        event = verifier.webhooks.unwrap(second.body, second.headers)  # the SDK checks the signature and its age
        assert event.type == "batch.completed" and event.data.id == batch_id and event.id == second.headers["webhook-id"]
        with pytest.raises(openai.InvalidWebhookSignatureError):
            verifier.webhooks.unwrap(second.body.replace(b"completed", b"cancelled"), second.headers)
        deliveries = (await admin(base_url, "GET", f"/admin/webhooks/{created.json()['id']}/deliveries")).json()
        assert [(d["state"], d["attempts"], d["last_status"]) for d in deliveries["data"]] == [("delivered", 2, 200)]


async def test_a_receiver_answering_an_endless_body_is_delivered_not_read(jobs_settings):
    """The answer's status is all a delivery needs: its body is never read (it could be any size, or endless)."""
    settings = jobs_settings(webhook_timeout_seconds=3)
    async with receiving(endless_body=True) as receiver, running_gateway(settings) as (base_url, _):
        await jobs_ready(base_url)
        created = await admin(base_url, "POST", "/admin/webhooks",
                              json={"url": receiver.url, "key_id": key_id_of(settings), "events": ["batch.completed"]})
        await run_batch(base_url)
        await receiver.wait_for(1, timeout=30)
        path = f"/admin/webhooks/{created.json()['id']}/deliveries"

        async def attempted() -> bool:
            return (await admin(base_url, "GET", path)).json()["data"][0]["attempts"] >= 1

        await until(attempted, timeout=30, what="the delivery's first attempt recorded", interval=0.05)
        deliveries = (await admin(base_url, "GET", path)).json()["data"]
    assert [(d["state"], d["attempts"], d["last_status"], d["last_error"]) for d in deliveries] == [
        ("delivered", 1, 200, None)]


async def test_registration_refuses_private_and_loopback_destinations(jobs_settings):
    settings = jobs_settings(webhook_allowed_networks=[])
    async with running_gateway(settings) as (base_url, _):
        await jobs_ready(base_url)
        for url in ("http://127.0.0.1:9/hook", "http://10.1.2.3/hook", "http://169.254.169.254/latest",
                    "http://localhost:9/x", "http://[::1]:9/x", "ftp://example.com/x", "http://user:pw@example.com/",
                    # not a URL or not a host name (they were 500s: the parser's ValueError, the resolver's UnicodeError)
                    "http://[zz]/x", "http://a..example.com/", "http://" + "a" * 64 + ".example.com/"):
            answer = await admin(base_url, "POST", "/admin/webhooks", json={"url": url, "key_id": "k"})
            assert answer.status_code == 400 and answer.json()["error"]["param"] == "url", (url, answer.text)
        answer = await admin(base_url, "POST", "/admin/webhooks", json={"url": "https://example.com/x", "key_id": "k",
                                                                         "events": ["batch.nope"]})
        assert answer.json()["error"]["param"] == "events"
        # an unknown field is refused, as the admin API's: a misspelt "event" subscribed to every event
        answer = await admin(base_url, "POST", "/admin/webhooks", json={"url": "https://example.com/x", "key_id": "k",
                                                                         "event": ["batch.failed"]})
        assert answer.status_code == 400 and answer.json()["error"]["param"] == "event", answer.text
        # NUL characters, which PostgreSQL text cannot hold (they were 503s 'retry' there)
        answer = await admin(base_url, "POST", "/admin/webhooks", json={"url": "https://example.com/x", "key_id": "k",
                                                                         "description": "a\x00b"})
        assert answer.status_code == 400 and answer.json()["error"]["param"] == "description", answer.text
        for path, param in (("/admin/webhooks/we_%00", "webhook_id"), ("/admin/webhooks?key_id=%00", "key_id")):
            answer = await admin(base_url, "GET", path)
            assert answer.status_code == 400 and answer.json()["error"]["param"] == param, answer.text
        refused = await admin(base_url, "POST", "/admin/webhooks", json={"url": "https://example.com/", "key_id": "k"},
                              headers={"authorization": f"Bearer {READ_KEY}"})
        assert refused.status_code == 403


async def test_registration_refuses_a_key_id_no_key_has(jobs_gateway, jobs_settings):
    base_url, _ = jobs_gateway
    url = "http://127.0.0.1:9/hook"
    unknown = await admin(base_url, "POST", "/admin/webhooks", json={"url": url, "key_id": "key_0000000000000000"})
    assert unknown.status_code == 400, unknown.text
    assert unknown.json()["error"] | {"message": None} == {
        "message": None, "type": "invalid_request_error", "param": "key_id", "code": "key_not_found"}
    database_key = (await admin(base_url, "POST", "/admin/keys", json={"name": "hooked"})).json()["id"]
    for key_id in (database_key, key_id_of(jobs_settings())):  # a database key, a configured key
        created = await admin(base_url, "POST", "/admin/webhooks", json={"url": url, "key_id": key_id})
        assert created.status_code == 200 and created.json()["key_id"] == key_id, created.text
    assert (await admin(base_url, "DELETE", f"/admin/keys/{database_key}")).status_code == 200
    revoked = await admin(base_url, "POST", "/admin/webhooks", json={"url": url, "key_id": database_key})
    assert revoked.status_code == 400, revoked.text
    assert (revoked.json()["error"]["param"], revoked.json()["error"]["code"]) == ("key_id", "key_revoked")
    listed = (await admin(base_url, "GET", "/admin/webhooks")).json()["data"]
    assert sorted(endpoint["key_id"] for endpoint in listed) == sorted([database_key, key_id_of(jobs_settings())])


async def test_endpoints_are_listed_in_pages_as_the_admin_keys_are(jobs_gateway, jobs_settings):
    base_url, _ = jobs_gateway
    made = []
    for n in range(5):
        created = await admin(base_url, "POST", "/admin/webhooks",
                              json={"url": f"http://127.0.0.1:9/hook{n}", "key_id": key_id_of(jobs_settings())})
        assert created.status_code == 200, created.text
        made.append(created.json()["id"])
    everything = (await admin(base_url, "GET", "/admin/webhooks")).json()
    keys = (await admin(base_url, "GET", "/admin/keys")).json()
    assert everything.keys() == keys.keys() == {"object", "data", "first_id", "last_id", "has_more"}
    assert [endpoint["id"] for endpoint in everything["data"]] == sorted(made) and not everything["has_more"]
    seen, after = [], None
    for _ in range(5):  # 5 endpoints, 2 a page: 3 pages (a bound, should paging never end)
        page = (await admin(base_url, "GET", "/admin/webhooks", params={"limit": 2, **({"after": after} if after
                                                                                        else {})})).json()
        ids = [endpoint["id"] for endpoint in page["data"]]
        assert (page["first_id"], page["last_id"]) == (ids[0], ids[-1]) and len(ids) <= 2, page
        seen += ids
        after = page["last_id"]
        if not page["has_more"]:
            break
    assert seen == sorted(made)
    for limit in (0, 1001):  # the keys' bounds: 1 to 1000
        answer = await admin(base_url, "GET", "/admin/webhooks", params={"limit": limit})
        assert answer.status_code == 400 and answer.json()["error"]["param"] == "limit", answer.text


async def test_delivery_checks_the_address_it_connects_to():
    """A name that resolves to loopback at delivery (DNS rebinding) is refused by the connection's resolver."""
    resolver = CheckingResolver(parse_networks([]))
    with pytest.raises(DestinationRefused):
        await resolver.resolve("localhost", 80, socket.AF_UNSPEC)
    allowed = CheckingResolver(parse_networks(["127.0.0.0/8", "::1/128"]))
    assert {answer["host"] for answer in await allowed.resolve("localhost", 80, socket.AF_INET)} == {"127.0.0.1"}
    await resolver.close()
    await allowed.close()
    assert not address_allowed("::ffff:127.0.0.1", [])  # an IPv4-mapped loopback is loopback
    assert address_allowed("8.8.8.8", [])


def test_signature_is_standard_webhooks():
    # Standard Webhooks' published test vector (its libraries' tests).
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    body = b'{"test": 2432232314}'
    expected = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
    assert signing.signature(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body) == expected
    assert signing.verify(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body, f"v1,bad {expected}")
