"""The request context: one object per request, the failures' HTTP mapping, and where later issues attach."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.engines.errors import BadGateway, EngineHTTPError, EngineTimeout, EngineUnavailable
from gateway.failures import Conflict, Gone, Invalid, LimitReached, NotFound, Unavailable
from gateway.http.auth import Principal
from gateway.http.context import RequestContext
from gateway.http.errors import OPENAI_SHAPE, GatewayError, http_error


@dataclass
class Span:  # what a tracing issue would attach
    name: str


def test_what_only_some_requests_carry_is_attached_by_its_type_and_costs_nothing_until_then():
    request = RequestContext("rid-1", principal=Principal(key_id="k1", role="read"))
    assert request.get(Span) is None and request._extensions is None  # nothing allocated
    request.put(Span("relay"))
    assert request.get(Span) == Span("relay") and request.key_id == "k1"
    detached = request.detached()
    assert (detached.request_id, detached.key_id, detached.scope, detached.server_send) == ("rid-1", "k1", None, None)
    assert RequestContext("rid-2").key_id == "-"  # nobody authenticated (a public path)


def test_each_failure_has_one_status_and_an_engines_own_4xx_passes_through():
    expected = [(Invalid("x"), 400), (NotFound("x"), 404), (Conflict("x"), 409), (Gone("x"), 410),
                (LimitReached("x", retry_after=1), 429), (Unavailable("x"), 503), (EngineUnavailable(), 503),
                (EngineTimeout(), 504), (BadGateway(), 502), (EngineHTTPError(422, "bad", b"{}"), 422),
                (EngineHTTPError(500, "boom", b"{}"), 502), (GatewayError(418, "teapot"), 418)]
    assert [http_error(failure).status for failure, _ in expected] == [status for _, status in expected]
    refusal = OPENAI_SHAPE.http(LimitReached("slow down", code="too_many_sessions", retry_after=1))
    assert refusal.headers == {"retry-after": "1"} and refusal.code == "too_many_sessions"


def test_a_kept_parse_answers_for_those_very_bytes_only():
    request = RequestContext("rid-3")
    body = b'{"model": "m", "max_tokens": 4}'
    assert request.parsed(body) is None  # nothing kept: the reader parses
    payload = {"model": "m", "max_tokens": 4}
    request.keep_parsed(body, payload)
    assert request.parsed(body) is payload
    # The same text in other bytes (a body rewritten on the way, say an output limit lowered) is
    # not described by the kept parse: its reader parses what it got.
    assert request.parsed(bytes(bytearray(body))) is None and request.parsed(None) is None
    assert request.detached().parsed(body) is payload  # a background run reads the same body
