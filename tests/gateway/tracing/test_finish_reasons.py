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


ANSWERS = [  # (a non-streamed answer's JSON, the finish reasons and token counts its spans get)
    ({"choices": [{"finish_reason": "stop"}], "usage": {"prompt_tokens": 3, "completion_tokens": 4}},
     ("stop",), 3, 4),
    ({"choices": [{"finish_reason": None}], "usage": {"input_tokens": 3, "output_tokens": 4}}, None, 3, 4),
    ({"choices": [{"finish_reason": "stop"}, {"index": 1}, "x", {"finish_reason": "length"}]},
     ("stop", "length"), None, None),
    ({"choices": ["x"], "usage": {"prompt_tokens": True, "input_tokens": 5, "completion_tokens": 2.0}}, None, 5, None),
    ({"choices": [], "stop_reason": "end_turn"}, None, None, None),  # (a list of choices wins, even empty)
    ({"stop_reason": "end_turn", "usage": {"input_tokens": 7, "output_tokens": 1}}, ("end_turn",), 7, 1),
    ({"object": "response", "status": "incomplete"}, ("incomplete",), None, None),
]


@pytest.mark.parametrize(("answer", "reasons", "input_tokens", "output_tokens"), ANSWERS)
def test_a_non_streamed_answer_gives_its_finish_reasons_and_counts(answer, reasons, input_tokens, output_tokens):
    import orjson

    from gateway.tracing.conventions import Conventions, response_attributes

    attributes = response_attributes(Conventions(), orjson.dumps(answer))
    assert attributes.get("gen_ai.response.finish_reasons") == reasons
    assert attributes.get("gen_ai.usage.input_tokens") == input_tokens
    assert attributes.get("gen_ai.usage.output_tokens") == output_tokens
