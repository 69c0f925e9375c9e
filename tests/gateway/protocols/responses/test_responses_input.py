"""Bad input on the Responses routes: OpenAI's 400 envelope naming the field, never a 500 or a hang."""

from __future__ import annotations

import httpx
import pytest

from tests.gateway.protocols.conftest import headers

pytestmark = [pytest.mark.integration, pytest.mark.engine]


def post(url: str, body: bytes | str) -> httpx.Response:
    return httpx.post(url + "/v1/responses", content=body, headers={**headers(), "content-type": "application/json"},
                      timeout=30)


@pytest.mark.parametrize(("body", "param"), [
    ('{"input": "hi", ', "body"),                                   # truncated JSON
    ("[1, 2]", "body"),                                             # not an object
    ("", "body"),
    ('{"model": "m"}', "input"),                                    # no input
    ('{"input": 5}', "input"),
    ('{"input": "hi", "stream": "maybe"}', "stream"),
    ('{"input": "hi", "background": 1}', "background"),
    ('{"input": "hi", "store": "no"}', "store"),
    ('{"input": "hi", "model": 7}', "model"),
    ('{"input": "hi", "previous_response_id": 5}', "previous_response_id"),
    ('{"input": "hi", "max_output_tokens": 100000000000000000000}', "max_output_tokens"),
    ('{"input": "hi", "seed": -99999999999999999999}', "seed"),
    ('{"input": [{"role": "user", "content": "hi", "x": 1e999}]}', "input.0.x"),
    ('{"input": "hi", "max_output_tokens": "ten"}', "body.max_output_tokens"),  # the engine's own 400
    ('{"input": "hi", "temperature": -1}', "temperature"),                       # the engine's own 400
])
def test_bad_input_is_a_400_naming_the_field(gateway_url, body, param):
    answer = post(gateway_url, body)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error" and error["message"]


def test_unknown_model_and_unknown_previous_response_are_404s(gateway_url):
    unknown_model = post(gateway_url, '{"input": "hi", "model": "nope"}')
    assert unknown_model.status_code == 404 and unknown_model.json()["error"]["param"] == "model"
    unknown_previous = post(gateway_url, '{"input": "hi", "previous_response_id": "resp_nope"}')
    assert unknown_previous.status_code == 404
    assert unknown_previous.json()["error"]["param"] == "previous_response_id"


def test_unknown_response_is_a_404_on_every_route(gateway_url):
    base = gateway_url + "/v1/responses/resp_nope"
    for method, url in [("GET", base), ("GET", base + "?stream=true"), ("POST", base + "/cancel"),
                        ("DELETE", base)]:
        answer = httpx.request(method, url, headers=headers(), timeout=10)
        assert answer.status_code == 404 and answer.json()["error"]["param"] == "response_id", (method, url)


def test_bad_query_parameters_on_retrieve_are_400s(gateway_url):
    created = post(gateway_url, '{"input": "hi", "max_output_tokens": 2}').json()
    answer = httpx.get(f"{gateway_url}/v1/responses/{created['id']}", params={"stream": "maybe"},
                       headers=headers(), timeout=10)
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "stream"
