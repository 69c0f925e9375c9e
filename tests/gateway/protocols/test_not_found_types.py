"""A 404's ``error.type`` is each protocol's own: OpenAI says ``invalid_request_error``, Anthropic ``not_found_error``.

OpenAI answers an unknown object as ``{"error": {"message": "No such File object: file-abc", "type":
"invalid_request_error", "param": "id", "code": null}}`` (its SDK raises ``NotFoundError`` by status);
Anthropic's envelope names the status itself (``not_found_error``). The gateway's OpenAI-shaped routes
(the inference routes, files, batches, responses, the admin API and webhooks) follow OpenAI, the
Messages routes Anthropic.
"""

from __future__ import annotations

import pytest

from tests.support.gateway import READ_KEY, WRITE_KEY, bearer, serving

OPENAI_SHAPED = [
    ("GET", "/v1/files/file-nope", None),
    ("GET", "/v1/files/file-nope/content", None),
    ("GET", "/v1/batches/batch_nope", None),
    ("POST", "/v1/batches/batch_nope/cancel", None),
    ("GET", "/v1/batches?after=batch_nope", None),
    ("GET", "/v1/responses/resp_nope", None),
    ("POST", "/v1/chat/completions", {"model": "no-such-model", "messages": [{"role": "user", "content": "hi"}]}),
    ("GET", "/admin/keys/key_nope", None),
    ("GET", "/admin/webhooks/wh_nope", None),
]
ANTHROPIC_SHAPED = [
    ("GET", "/v1/messages/batches/msgbatch_nope", None),
    ("GET", "/v1/messages/batches/msgbatch_nope/results", None),
]


@pytest.fixture
async def gateway(make_settings):
    async with serving(make_settings(api_keys=[READ_KEY], admin_api_keys=[WRITE_KEY])) as client:
        yield client


@pytest.mark.parametrize(("method", "path", "body"), OPENAI_SHAPED, ids=[path for _, path, _ in OPENAI_SHAPED])
async def test_an_openai_shaped_404_is_an_invalid_request_error(gateway, method, path, body):
    answer = await gateway.request(method, path, json=body, headers=bearer(WRITE_KEY))
    assert answer.status_code == 404, answer.text
    assert answer.json()["error"]["type"] == "invalid_request_error", answer.text


@pytest.mark.parametrize(("method", "path", "body"), ANTHROPIC_SHAPED, ids=[path for _, path, _ in ANTHROPIC_SHAPED])
async def test_an_anthropic_shaped_404_stays_a_not_found_error(gateway, method, path, body):
    answer = await gateway.request(method, path, json=body, headers=bearer(WRITE_KEY))
    assert answer.status_code == 404, answer.text
    assert answer.json() == {"type": "error", "error": {"type": "not_found_error",
                                                        "message": answer.json()["error"]["message"]}}, answer.text
