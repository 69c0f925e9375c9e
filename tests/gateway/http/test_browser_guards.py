"""A web page may not drive the gateway, and /metrics is for admins and scrapers (issue 29, findings 5 and 9).

Without keys (loopback mode, every caller an admin) a page the developer visits could reach
``127.0.0.1:8000`` through DNS rebinding (its own name, re-pointed: the ``Host`` header keeps the
name) or with a cross-site "simple" request (a ``text/plain`` or form body, no preflight). The
first is refused by the ``Host`` check, the second by the content-type rule; neither reaches
the engine. Through the whole app, in front of the fake engine.
"""

from __future__ import annotations

import pytest

from gateway.http.browser_guards import content_type_refusal, host_name, is_local_name
from tests.support.bodies import CHAT, chat_body
from tests.support.gateway import READ_KEY, WRITE_KEY, bearer, serving

METRICS_KEY = "sk-test-metrics-1357924680"


@pytest.mark.parametrize("host", ["attacker.example", "attacker.example:8000", "127.0.0.1.nip.io",
                                  "localhost.attacker.example", "10.0.0.5:8000", "[fe80::1]:8000"])
async def test_keyless_gateway_refuses_a_rebound_host_before_anything_runs(client, fake_engine, host):
    answer = await client.post(CHAT, json=chat_body(), headers={"host": host})
    admin = await client.get("/admin/keys", headers={"host": host})
    health = await client.get("/health", headers={"host": host})
    for refused in (answer, admin, health):
        assert refused.status_code == 421, refused.text
    assert answer.json()["error"]["param"] == "host" and answer.json()["error"]["code"] == "host_not_allowed"
    assert fake_engine.received == []


@pytest.mark.parametrize("host", ["localhost", "localhost:8000", "127.0.0.1:8000", "127.3.4.5", "[::1]:8000",
                                  "LOCALHOST:8000", "app.localhost:5173"])
async def test_keyless_gateway_answers_requests_addressed_to_this_machine(client, host):
    answer = await client.post(CHAT, json=chat_body(), headers={"host": host})
    assert answer.status_code == 200, answer.text


async def test_allowed_hosts_names_more_and_keys_turn_the_host_check_off(make_settings):
    async with serving(make_settings(allowed_hosts="devbox.internal")) as client:
        assert (await client.post(CHAT, json=chat_body(), headers={"host": "devbox.internal:8000"})).status_code == 200
        assert (await client.post(CHAT, json=chat_body(), headers={"host": "other.internal"})).status_code == 421
    async with serving(make_settings(api_keys=[READ_KEY])) as client:
        answer = await client.post(CHAT, json=chat_body(), headers={"host": "gateway.example.com", **bearer(READ_KEY)})
        assert answer.status_code == 200


@pytest.mark.parametrize("content_type", ["text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=B", "application/xml"])
@pytest.mark.parametrize("path", [CHAT, "/v1/responses", "/v1/messages", "/v1/cancel/s-1", "/admin/keys"])
async def test_a_body_that_is_not_json_is_refused_on_json_routes(client, fake_engine, content_type, path):
    body = b'{"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "x": "="}'
    answer = await client.post(path, content=body, headers={"content-type": content_type})
    assert answer.status_code == 415, answer.text
    error = answer.json()["error"]
    assert "application/json" in (error if isinstance(error, str) else error["message"])
    assert fake_engine.received == []


async def test_json_types_and_no_content_type_are_read_as_json(client):
    body = b'{"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}'
    for headers in ({"content-type": "application/json; charset=utf-8"}, {"content-type": "application/vnd.x+json"},
                    {}):
        assert (await client.post(CHAT, content=body, headers=headers)).status_code == 200, headers


async def test_multipart_routes_take_multipart(client):
    body = (b'--B\r\nContent-Disposition: form-data; name="model"\r\n\r\nfake-model\r\n'
            b'--B\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\nRIFF\r\n--B--\r\n')
    audio = await client.post("/v1/audio/transcriptions", content=body,
                              headers={"content-type": "multipart/form-data; boundary=B"})
    plain = await client.post("/v1/audio/transcriptions", content=body, headers={"content-type": "text/plain"})
    assert audio.status_code == 200, audio.text
    assert plain.status_code == 415 and "multipart/form-data" in plain.json()["error"]["message"]


def test_the_rules_by_themselves():
    assert host_name(b"[::1]:8000") == "::1" and host_name(b"Example.COM:80") == "example.com"
    assert host_name(b"localhost") == "localhost"
    assert is_local_name("127.255.0.1") and not is_local_name("128.0.0.1") and not is_local_name("localhostx")
    assert content_type_refusal("GET", b"text/plain", "/v1/models", frozenset()) is None
    assert content_type_refusal("POST", b"", CHAT, frozenset()) is None
    assert content_type_refusal("POST", b"Application/JSON", CHAT, frozenset()) is None
    assert content_type_refusal("DELETE", b"text/plain", "/v1/responses/x", frozenset()).status == 415


async def test_metrics_needs_an_admin_key_or_a_metrics_key(make_settings):
    settings = make_settings(api_keys=[READ_KEY], admin_api_keys=[WRITE_KEY], metrics_api_keys=METRICS_KEY)
    async with serving(settings) as client:
        anonymous = await client.get("/metrics")
        reader = await client.get("/metrics", headers=bearer(READ_KEY))
        admin = await client.get("/metrics", headers=bearer(WRITE_KEY))
        scraper = await client.get("/metrics", headers=bearer(METRICS_KEY))
        scraper_elsewhere = await client.get("/v1/models", headers=bearer(METRICS_KEY))
        scraper_chat = await client.post(CHAT, json=chat_body(), headers=bearer(METRICS_KEY))
    assert anonymous.status_code == 401
    assert reader.status_code == 403 and "METRICS_API_KEYS" in reader.json()["detail"]
    assert admin.status_code == 200 and scraper.status_code == 200
    assert "gateway_requests_total" in scraper.text
    assert scraper_elsewhere.status_code == 401 and scraper_chat.status_code == 401  # a scraper's key reads metrics only
