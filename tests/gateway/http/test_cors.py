"""CORS: off by default; with CORS_ORIGINS, preflights answered before auth and admission, only for allowed origins."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gateway.config import Settings
from tests.support.bodies import CHAT, chat_body
from tests.support.gateway import READ_KEY, WRITE_KEY, bearer, running_gateway, serving
from tests.support.sse_client import fresh_client

PAGE = "https://app.example.com"
STRANGER = "https://evil.example.net"


def preflight(origin: str, method: str = "POST", headers: str = "authorization, content-type") -> dict:
    return {"origin": origin, "access-control-request-method": method, "access-control-request-headers": headers}


def cors_headers(response) -> dict[str, str]:
    return {name: value for name, value in response.headers.items() if name.startswith("access-control-")}


async def test_without_cors_origins_there_is_no_cors_header_at_all(make_settings, fake_engine):
    async with serving(make_settings(api_keys=[READ_KEY])) as client:
        asked = await client.options(CHAT, headers=preflight(PAGE))
        answered = await client.post(CHAT, json=chat_body(), headers={"origin": PAGE, **bearer(READ_KEY)})
        health = await client.get("/health", headers={"origin": PAGE})
    assert asked.status_code == 401  # an ordinary request without a key, as before: the browser refuses the call
    assert answered.status_code == 200 and health.status_code == 200
    for response in (asked, answered, health):
        assert cors_headers(response) == {} and "vary" not in response.headers


async def test_an_allowed_origins_preflight_is_answered_before_auth_and_admission(make_settings, fake_engine):
    requested = ("authorization, x-api-key, content-type, last-event-id, x-request-id, anthropic-version, "
                 "openai-beta, x-session-affinity, x-stainless-lang, X-Stainless-Retry-Count, x-custom-thing")
    async with serving(make_settings(api_keys=[READ_KEY], cors_origins=PAGE, max_inflight=1)) as client:
        answer = await client.options(CHAT, headers=preflight(PAGE, headers=requested))
        on_a_session = await client.options("/v1/sessions/s-1/events", headers=preflight(PAGE, "GET", "last-event-id"))
    assert answer.status_code == 204 and answer.content == b""
    got = cors_headers(answer)
    assert got["access-control-allow-origin"] == PAGE
    assert {"GET", "POST", "DELETE"} <= {m.strip() for m in got["access-control-allow-methods"].split(",")}
    allowed = {h.strip() for h in got["access-control-allow-headers"].split(",")}
    wanted = {h.strip().lower() for h in requested.split(",")} - {"x-custom-thing"}
    assert wanted <= allowed and "x-custom-thing" not in allowed  # SDK telemetry headers yes, anything else no
    assert "access-control-allow-credentials" not in got  # keys travel in headers, never cookies
    assert int(got["access-control-max-age"]) > 0 and "origin" in answer.headers["vary"]
    assert on_a_session.status_code == 204
    assert fake_engine.received == []  # nothing reached the engine, nothing was admitted


async def test_a_preflight_from_another_origin_is_refused_saying_why(make_settings, fake_engine):
    async with serving(make_settings(api_keys=[READ_KEY], admin_api_keys=[WRITE_KEY], cors_origins=f"{PAGE},http://localhost:5173")) as client:
        refused = await client.options(CHAT, headers=preflight(STRANGER))
        other_port = await client.options(CHAT, headers=preflight("http://localhost:5174"))
        second = await client.options(CHAT, headers=preflight("http://localhost:5173"))
        metrics = (await client.get("/metrics", headers=bearer(WRITE_KEY))).text.splitlines()
    assert refused.status_code == 403 and other_port.status_code == 403 and second.status_code == 204
    assert 'gateway_requests_total{route="preflight",status="403"} 2.0' in metrics
    assert 'gateway_requests_total{route="preflight",status="204"} 1.0' in metrics
    assert 'gateway_rejected_total{reason="cors"} 2.0' in metrics
    assert refused.json()["error"]["code"] == "cors_origin_not_allowed"
    assert STRANGER in refused.json()["error"]["message"] and "CORS_ORIGINS" in refused.json()["error"]["message"]
    assert cors_headers(refused) == {}


async def test_answers_to_an_allowed_origin_name_it_and_expose_the_gateways_headers(make_settings, fake_engine):
    async with serving(make_settings(api_keys=[READ_KEY], cors_origins=PAGE, session_store="memory",
                                     max_inflight_per_key=1)) as client:
        ok = await client.post(CHAT, json=chat_body(stream=True), headers={"origin": PAGE, **bearer(READ_KEY)})
        no_key = await client.post(CHAT, json=chat_body(), headers={"origin": PAGE})
        stranger = await client.post(CHAT, json=chat_body(), headers={"origin": STRANGER, **bearer(READ_KEY)})
        no_origin = await client.post(CHAT, json=chat_body(), headers=bearer(READ_KEY))
    assert ok.status_code == 200 and ok.headers["x-session-id"]
    for response in (ok, no_key):  # refusals too: a page must be able to read a 401 or a 429's Retry-After
        got = cors_headers(response)
        assert got["access-control-allow-origin"] == PAGE
        exposed = {h.strip() for h in got["access-control-expose-headers"].split(",")}
        assert {"x-request-id", "x-gateway-added-ms", "x-session-id", "retry-after"} <= exposed
        assert response.headers["vary"] == "origin"
    assert no_key.status_code == 401
    # Not an allowed origin (or no Origin): served as ever (CORS is the browser's rule), never labelled for a page.
    assert stranger.status_code == no_origin.status_code == 200
    assert cors_headers(stranger) == cors_headers(no_origin) == {}
    assert stranger.headers["vary"] == no_origin.headers["vary"] == "origin"


async def test_a_429_from_admission_reaches_the_page_with_its_retry_after(make_settings, fake_engine):
    fake_engine.chunk_delay = 0.05  # a real server: httpx's in-process transport would buffer the stream whole
    async with running_gateway(make_settings(api_keys=[READ_KEY], cors_origins=PAGE, max_inflight_per_key=1,
                                             flow_control=False)) \
            as (base, _), fresh_client(base) as client:
        async with client.stream("POST", CHAT, json=chat_body(stream=True, max_tokens=400), headers=bearer(READ_KEY)):
            refused = await client.post(CHAT, json=chat_body(), headers={"origin": PAGE, **bearer(READ_KEY)})
    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
    assert cors_headers(refused)["access-control-allow-origin"] == PAGE
    assert "retry-after" in cors_headers(refused)["access-control-expose-headers"]


async def test_any_origin_only_when_asked_and_never_with_credentials(make_settings, fake_engine):
    async with serving(make_settings(api_keys=[READ_KEY], cors_origins="*")) as client:
        asked = await client.options(CHAT, headers={**preflight(STRANGER),
                                                    "access-control-request-private-network": "true"})
        answered = await client.post(CHAT, json=chat_body(), headers={"origin": STRANGER, **bearer(READ_KEY)})
    assert asked.status_code == 204 and cors_headers(asked)["access-control-allow-origin"] == "*"
    assert cors_headers(asked)["access-control-allow-private-network"] == "true"
    assert cors_headers(answered)["access-control-allow-origin"] == "*" and "vary" not in answered.headers
    for response in (asked, answered):
        assert "access-control-allow-credentials" not in cors_headers(response)


@pytest.mark.parametrize(("given", "kept"), [
    ("https://App.Example.com", ["https://app.example.com"]),
    ("https://app.example.com:443, http://localhost:80", ["https://app.example.com", "http://localhost"]),
    ("http://127.0.0.1:5173,http://[::1]:8080", ["http://127.0.0.1:5173", "http://[::1]:8080"]),
    ("*", ["*"]),
    ("", []),
])
def test_origins_are_kept_as_browsers_send_them(given, kept):
    assert Settings(cors_origins=given).cors_origins == kept


@pytest.mark.parametrize(("given", "reason"), [
    ("https://app.example.com/", "without a path or a trailing slash"),
    ("https://app.example.com/chat", "without a path"),
    ("app.example.com", "scheme://host"),
    ("https://*.example.com", "scheme://host"),
    ("ftp://files.example.com", "scheme://host"),
    ("https://app.example.com:99999", "no valid port"),
    ("null", "'null'"),
    ("*,https://app.example.com", "'*' alone"),
])
def test_an_origin_that_could_never_match_is_refused_by_name(given, reason):
    with pytest.raises(ValidationError, match="CORS_ORIGINS") as refused:
        Settings(cors_origins=given)
    assert reason in str(refused.value)


async def test_a_page_may_read_the_trace_id_of_its_call(make_settings, fake_engine):
    """With tracing on, ``x-trace-id`` is exposed too: a page can report the trace of a call that went wrong."""
    settings = make_settings(api_keys=[READ_KEY], cors_origins=PAGE,
                             otel_exporter_otlp_traces_endpoint="http://127.0.0.1:9/v1/traces")
    async with serving(settings) as client:
        answered = await client.post(CHAT, json=chat_body(), headers={"origin": PAGE, **bearer(READ_KEY)})
        refused = await client.post(CHAT, json=chat_body(), headers={"origin": PAGE})
    for response in (answered, refused):
        assert response.headers["x-trace-id"]
        exposed = {h.strip() for h in cors_headers(response)["access-control-expose-headers"].split(",")}
        assert "x-trace-id" in exposed
