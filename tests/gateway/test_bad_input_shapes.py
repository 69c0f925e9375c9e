"""Bad input is a 400 naming the field on every raw route, never a 500 (issue 29, finding 3).

Found from outside: ``Last-Event-ID: abc:--1`` and ``abc:²`` (``str.isdigit`` says yes to
``²``, ``int`` does not), ``?starting_after=²``, and a JSON body nested 5,000 levels deep on
``/v1/responses`` and ``/v1/messages`` (the standard library's reader ran out of stack), each
answered 500 with a traceback. Every raw route the app serves gets every one of these shapes
(new routes are picked up from the app's own declaration), and the parsers themselves get
whatever hypothesis draws.
"""

from __future__ import annotations

import re

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.failures import Invalid
from gateway.http.errors import GatewayError
from gateway.protocols.common.body import MAX_DEPTH, json_object
from gateway.sessions.ids import parse_last_event_id, parse_position
from tests.support.gateway import serving

DEEP = b'{"model": "fake-model", "input": ' + b"[" * 5000 + b"]" * 5000 + b"}"
DEEPER_THAN_WRITTEN = b'{"model": "fake-model", "messages": ' + b"[" * 300 + b"]" * 300 + b"}"
DEEP_OBJECTS = b'{"a": ' * 2000 + b"1" + b"}" * 2000
BODIES = {"5000 levels of arrays": DEEP, "300 levels of arrays": DEEPER_THAN_WRITTEN,
          "2000 levels of objects": DEEP_OBJECTS}
LAST_EVENT_IDS = [b"abc:--1", b"abc:\xb2", b"abc:\xd9\xa1", b"abc:-", b"abc:1e3", b"abc:" + b"9" * 40,
                  b"abc: 1_000", b"--1", b"\xb2", b"abc:-2"]
POSITIONS = ["\u00b2", "--1", "\u0661", "1_000", "-", "9" * 40, "0x10", "-1"]


def _concrete(path: str) -> str:
    return re.sub(r"{[^}]+}", "s-1", path)


@pytest.fixture
async def gateway(make_settings):
    async with serving(make_settings(session_store="sqlite")) as client:
        yield client


async def test_every_raw_route_answers_deep_json_with_a_400_naming_the_body(gateway):
    routes = [route for route in gateway.app.raw_routes if route.method in ("POST", "PUT", "PATCH")]
    assert {"/v1/responses", "/v1/messages", "/v1/chat/completions"} <= {route.path for route in routes}
    answers = {}
    for route in routes:
        for path in route.paths:
            for name, body in BODIES.items():
                answer = await gateway.request(route.method, _concrete(path), content=body,
                                               headers={"content-type": "application/json"})
                answers[(path, name)] = answer
    server_errors = {key: answer.text[:200] for key, answer in answers.items() if answer.status_code >= 500}
    assert server_errors == {}
    for (path, name), answer in answers.items():
        if path in READ_FIRST:
            assert answer.status_code == 400 and "nested too deeply" in answer.text, (path, name, answer.text[:200])
        else:  # a route that looks up what it names first, or takes no JSON (audio), may say so instead
            assert answer.status_code in (400, 404), (path, name, answer.text[:200])


NOT_RESUMABLE = {"/v1/completions", "/completions"}  # legacy completions have no sessions
READ_FIRST = {"/v1/chat/completions", "/chat/completions", "/v1/completions", "/completions", "/v1/responses",
              "/v1/messages", "/v1/messages/count_tokens", "/v1/embeddings", "/embeddings"}


async def test_every_streaming_route_answers_a_bad_last_event_id_with_a_400_naming_it(gateway):
    routes = [route for route in gateway.app.raw_routes if route.streams and route.method == "POST"]
    bodies = {"/v1/chat/completions": {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}],
                                       "stream": True, "session_id": "abc"},
              "/v1/completions": {"model": "fake-model", "prompt": "hi", "stream": True},
              "/v1/responses": {"model": "fake-model", "input": "hi", "stream": True},
              "/v1/messages": {"model": "fake-model", "max_tokens": 4, "stream": True, "session_id": "abc",
                               "messages": [{"role": "user", "content": "hi"}]}}
    assert set(bodies) >= {path for route in routes for path in route.paths if path.startswith("/v1/")}
    for route in routes:
        path = route.path
        for value in LAST_EVENT_IDS:
            answer = await gateway.post(path, json=bodies[path], headers=[(b"last-event-id", value)])
            if path in NOT_RESUMABLE:  # the header means nothing there: the stream is answered
                assert answer.status_code == 200, (path, value, answer.text[:300])
                continue
            assert answer.status_code == 400, (path, value, answer.text[:300])
            assert "Last-Event-ID" in answer.text, (path, value, answer.text[:300])  # (no session id: a bare
            # index is refused too, so every value here is)
    for value in LAST_EVENT_IDS:
        replay = await gateway.get("/v1/sessions/abc/events", headers=[(b"last-event-id", value)])
        assert replay.status_code == 400 and replay.json()["error"]["param"] == "last_event_id", (value, replay.text)


async def test_starting_after_takes_ascii_digits_only(gateway):
    for value in POSITIONS:
        answer = await gateway.get("/v1/responses/resp_x", params={"stream": "true", "starting_after": value})
        # (an unknown response is a 404 before its parameters are read: so use a stored one below)
        assert answer.status_code < 500, (value, answer.text)
    stored = await gateway.post("/v1/responses", json={"model": "fake-model", "input": "hi", "stream": True})
    response_id = next(orjson.loads(line[5:])["response"]["id"] for line in stored.text.splitlines()
                       if line.startswith("data:") and b'"response"' in line.encode())
    for value in POSITIONS:
        answer = await gateway.get(f"/v1/responses/{response_id}", params={"stream": "true", "starting_after": value})
        assert answer.status_code == 400, (value, answer.text)
        assert answer.json()["error"]["param"] == "starting_after"


# --- the parsers, with whatever hypothesis draws ------------------------------------------------
@given(st.text(max_size=30))
def test_parse_position_is_an_ascii_integer_or_nothing(text):
    value = parse_position(text)
    if value is not None:
        assert re.fullmatch(r"-?[0-9]{1,18}", text.strip())
        assert value == int(text.strip())


@given(st.text(alphabet=st.characters(categories=["Nd", "No", "Pd", "Zs"]) | st.sampled_from(":-0123456789"),
               max_size=24))
def test_parse_last_event_id_accepts_a_position_or_says_why_not(text):
    try:
        point = parse_last_event_id(text, session_id="abc")
    except Invalid as error:
        assert error.param == "last_event_id"
    else:
        assert point.session_id == "abc" and point.last_index >= -1


@given(st.recursive(st.none() | st.integers() | st.text(max_size=3),
                    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=2), inner, max_size=2),
                    max_leaves=8), st.integers(min_value=0, max_value=1500))
def test_json_object_reads_any_nesting_or_refuses_it_with_a_400(value, depth):
    raw = b'{"v": ' + b"[" * depth + orjson.dumps(value) + b"]" * depth + b"}"
    try:
        payload = json_object(raw)
    except GatewayError as error:
        assert error.status == 400 and error.param == "body"
        assert depth >= MAX_DEPTH - 10
    else:
        assert depth < MAX_DEPTH and "v" in payload
