"""Request bodies of the engine-API routes: a JSON object, or a 400 naming the field, never a 500."""

from __future__ import annotations

import pytest

from gateway.http.errors import GatewayError
from gateway.protocols.common.body import expect_bool, expect_int, json_object


def test_a_plain_body_is_parsed_as_is():
    assert json_object(b'{"input": "hi", "n": 9223372036854775807, "t": 0.5}') == {
        "input": "hi", "n": 9223372036854775807, "t": 0.5}


@pytest.mark.parametrize(("raw", "param"), [
    (b"", "body"),
    (b'{"input": ', "body"),
    (b"[1, 2]", "body"),
    (b'"text"', "body"),
    (b'{"max_output_tokens": 100000000000000000000}', "max_output_tokens"),
    (b'{"seed": 9223372036854775808}', "seed"),                 # one past int64: orjson would take it (uint64)
    (b'{"seed": -9223372036854775809}', "seed"),
    (b'{"input": [{"content": "x", "n": 1e400}]}', "input.0.n"),
    (b'{"temperature": NaN}', "temperature"),
    (b'{"a": {"b": [0, Infinity]}}', "a.b.1"),
])
def test_bad_bodies_are_400s_naming_the_field(raw, param):
    with pytest.raises(GatewayError) as refused:
        json_object(raw)
    assert refused.value.status == 400 and refused.value.param == param


def test_long_digit_runs_inside_strings_are_fine():
    assert json_object(b'{"input": "12345678901234567890123"}') == {"input": "12345678901234567890123"}


def test_field_checks_name_the_field():
    with pytest.raises(GatewayError) as wrong:
        expect_bool({"stream": "yes"}, "stream")
    assert wrong.value.param == "stream" and "boolean" in wrong.value.message
    with pytest.raises(GatewayError) as missing:
        expect_int({}, "max_tokens", required=True)
    assert missing.value.param == "max_tokens"
    with pytest.raises(GatewayError):
        expect_int({"max_tokens": True}, "max_tokens")  # a bool is not an integer here
    assert expect_int({"max_tokens": 3}, "max_tokens", minimum=1) == 3
