"""Every streamed shape puts the answer's finish reason on the server span (``gen_ai.response.finish_reasons``).

The OpenAI chat and completion streams are relayed without decoding their content chunks, so
their finish reason is read from the one chunk that carries it; Anthropic Messages and
Responses streams say it in their closing events. The fake engine stops at ``max_tokens``:
the reason is "length" (OpenAI), "max_tokens" (Anthropic) or "incomplete" (Responses).
"""

from __future__ import annotations

import pytest

from tests.gateway.tracing.conftest import traced
from tests.gateway.tracing.test_spans import wait_trace
from tests.support.gateway import serving

STREAMS = {
    "chat": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
             "chat fake-model"),
    "completion": ("/v1/completions", {"prompt": "hi", "max_tokens": 4}, "text_completion fake-model"),
    "messages": ("/v1/messages", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
                 "chat fake-model"),
    "responses": ("/v1/responses", {"input": "hi", "max_output_tokens": 4}, "chat fake-model"),
}


@pytest.mark.parametrize("shape", list(STREAMS))
async def test_a_stream_names_its_finish_reason(shape, make_settings, receiver):
    path, body, name = STREAMS[shape]
    async with serving(make_settings(**traced(receiver))) as client:
        response = await client.post(path, json={"model": "fake-model", "stream": True, **body})
        assert response.status_code == 200
    spans = await wait_trace(receiver, response.headers["x-trace-id"], {name})
    server = next(span for span in spans if span.kind == "SERVER")
    assert server.attributes["gateway.stream.ending"] == "completed"
    assert server.attributes["gen_ai.response.finish_reasons"] == [
        {"chat": "length", "completion": "length", "messages": "max_tokens", "responses": "incomplete"}[shape]]
    engine_call = next(span for span in spans if span.kind == "CLIENT")
    assert engine_call.attributes["gen_ai.response.finish_reasons"] == server.attributes[
        "gen_ai.response.finish_reasons"]
