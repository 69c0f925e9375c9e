"""An errored Messages-batch line says why it failed, in Anthropic's error envelope."""

from types import SimpleNamespace

import orjson

from gateway.batches.model import SUCCEEDED
from gateway.batches.results import anthropic_line


def errored(status_code, response=None, error=None):
    row = SimpleNamespace(custom_id="m1", outcome="errored", status_code=status_code,
                          response=orjson.dumps(response) if response is not None else None,
                          error=orjson.dumps(error) if error is not None else None)
    assert row.outcome != SUCCEEDED
    return orjson.loads(anthropic_line(row))["result"]


def test_an_openai_shaped_engine_answer_keeps_its_message_and_gets_the_type_of_its_status():
    result = errored(404, {"error": {"message": "The model `ghost` does not exist.", "type": "NotFoundError",
                                     "code": 404}})
    assert result == {"type": "errored", "error": {"type": "error", "error": {
        "type": "not_found_error", "message": "The model `ghost` does not exist."}}}


def test_an_answer_already_in_anthropics_envelope_is_kept_whole():
    body = {"type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens: too large"}}
    assert errored(400, body)["error"] == body


def test_the_gateways_own_error_wins_over_the_body():
    result = errored(429, {"detail": "busy"}, {"code": "rate_limit_exceeded", "message": "rpm limit reached"})
    assert result["error"]["error"] == {"type": "rate_limit_error", "message": "rpm limit reached"}


def test_a_failure_without_any_message_names_its_status():
    assert errored(502)["error"]["error"] == {"type": "api_error", "message": "the request failed with status 502"}
    assert errored(None)["error"]["error"] == {"type": "api_error", "message": "the request failed"}
    assert errored(404, {"detail": "Not Found"})["error"]["error"] == {"type": "not_found_error",
                                                                        "message": "Not Found"}
