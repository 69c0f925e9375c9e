"""The official anthropic SDK against the gateway and the real engine: messages, streams, tokens, errors."""

from __future__ import annotations

import contextlib
import random
import re
from datetime import UTC, datetime
from urllib.parse import urlparse

import anthropic
import httpx
import openai
import orjson
import pytest

from gateway.app import create_app
from tests.gateway.protocols.conftest import (
    KEY_A,
    KEY_B,
    RUNNING,
    engine_post,
    gateway_tokens,
    headers,
    surface_settings,
    wait_for_metric,
)
from tests.support.servers import run_uvicorn
from tests.support.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.integration, pytest.mark.engine]

GENERATED = "vllm:generation_tokens_total"

HELLO = [{"role": "user", "content": "Hello there"}]


@pytest.fixture
def claude(gateway_url) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gateway_url, api_key=KEY_A, max_retries=0)


def greedy(engine, tokens: int = 8, **extra) -> dict:
    return dict(model=engine.model, max_tokens=tokens, messages=HELLO, extra_body={"temperature": 0}, **extra)


def test_create_answers_what_the_engine_answers(claude, vllm_engine):
    message = claude.messages.create(**greedy(vllm_engine))
    direct = engine_post(vllm_engine, "/v1/messages", {"model": vllm_engine.model, "max_tokens": 8,
                                                      "messages": HELLO, "temperature": 0}).json()
    assert message.type == "message" and message.role == "assistant" and message.stop_reason == "max_tokens"
    assert message.content[0].text == direct["content"][0]["text"]
    assert message.usage.input_tokens == direct["usage"]["input_tokens"] and message.usage.output_tokens == 8


def test_a_plain_answer_always_has_its_stop_sequence(claude, vllm_engine):
    """Anthropic always sends ``stop_sequence`` (null unless one ended the message); vLLM drops the null."""
    raw = claude.messages.with_raw_response.create(**greedy(vllm_engine, 12))
    body, message = raw.http_response.json(), raw.parse()
    assert body["stop_reason"] == "max_tokens" and "stop_sequence" in body and body["stop_sequence"] is None
    assert message.content[0].text == body["content"][0]["text"]  # the rest as the engine wrote it
    words = message.content[0].text.split()
    assert len(words) > 2, message.content[0].text
    stop = words[len(words) // 2]  # the greedy answer reaches it: a stop sequence ends it there
    ended = claude.messages.with_raw_response.create(**greedy(vllm_engine, 12, stop_sequences=[stop])).http_response
    assert ended.json()["stop_reason"] == "stop_sequence" and ended.json()["stop_sequence"] == stop


def test_stream_relays_every_event_intact(claude, gateway_url, vllm_engine):
    with claude.messages.stream(**greedy(vllm_engine, 6)) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert kinds[-2] == "message_delta" and "content_block_delta" in kinds
    assert final.usage.output_tokens == 6 and final.stop_reason == "max_tokens"
    assert final.content[0].text == claude.messages.create(**greedy(vllm_engine, 6)).content[0].text
    # What the engine streams for the same request, event for event: the same events around the
    # deltas, the same text (vLLM puts one or several tokens in a delta as its timing goes, so the
    # deltas themselves may be cut differently from one run to the next), the same usage.
    body = {"model": vllm_engine.model, "max_tokens": 6, "messages": HELLO, "temperature": 0, "stream": True}
    via = sse_events(httpx.post(gateway_url + "/v1/messages", json=body, headers=headers(), timeout=60).text)
    direct = sse_events(engine_post(vllm_engine, "/v1/messages", body).text)
    assert outline(via) == outline(direct) == ["message_start", "content_block_start", "content_block_delta",
                                               "content_block_stop", "message_delta", "message_stop"]
    assert text_of(via) == text_of(direct) == final.content[0].text
    assert [d for k, d in via if k != "content_block_delta"] == [d for k, d in direct if k != "content_block_delta"]


def outline(events: list[tuple[str, dict]]) -> list[str]:
    """The event names, consecutive deltas counted once."""
    names: list[str] = []
    for kind, _ in events:
        if not (names and names[-1] == kind == "content_block_delta"):
            names.append(kind)
    return names


def text_of(events: list[tuple[str, dict]]) -> str:
    return "".join(d["delta"]["text"] for k, d in events if k == "content_block_delta")


def sse_events(text: str) -> list[tuple[str, dict]]:
    events = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if not line.startswith(":"))
        data = orjson.loads(lines["data"])
        data.get("message", {}).pop("id", None)
        events.append((lines["event"], data))
    return events


def test_models_list_and_retrieve_read_the_same_answer_in_both_sdks(claude, gateway_url, vllm_engine):
    """One ``/v1/models`` answer for both SDKs: each reads its own fields and ignores the other's."""
    # (vLLM stamps a card's `created` when it answers: compared within one answer, not across two.)
    listed = claude.models.with_raw_response.list()
    page, raw = listed.parse(), {card["id"]: card for card in listed.http_response.json()["data"]}
    assert page.has_more is False and page.first_id == page.data[0].id and page.last_id == page.data[-1].id
    assert {model.id for model in page} == set(raw) >= {vllm_engine.model, "stack-2.9"}
    retrieved = claude.models.with_raw_response.retrieve(vllm_engine.model)
    for model, card in [(model, raw[model.id]) for model in page] + [(retrieved.parse(),
                                                                      retrieved.http_response.json())]:
        assert model.type == "model" and model.display_name == model.id
        assert model.created_at == datetime.fromtimestamp(card["created"], UTC)  # (the SDK parses RFC 3339)
    alias = claude.models.retrieve("stack-2.9")
    assert alias.type == "model" and alias.id == alias.display_name == "stack-2.9"
    sdk = openai.OpenAI(base_url=gateway_url + "/v1", api_key=KEY_A, max_retries=0)
    theirs = sdk.models.retrieve(vllm_engine.model)
    assert theirs.object == "model" and theirs.id == vllm_engine.model and theirs.created > 0 and theirs.owned_by
    assert {model.id for model in sdk.models.list()} == set(raw)


def test_count_tokens_is_the_engines_count(claude, vllm_engine):
    counted = claude.messages.count_tokens(model=vllm_engine.model, system="Be brief.", messages=HELLO)
    direct = engine_post(vllm_engine, "/v1/messages/count_tokens", {"model": vllm_engine.model,
                                                                   "system": "Be brief.", "messages": HELLO}).json()
    assert counted.input_tokens == direct["input_tokens"] > 0


def test_a_prompt_past_the_context_is_anthropics_prompt_is_too_long(claude, vllm_engine):
    """Anthropic's wording, which clients act on (Claude Code compacts the conversation on it, and
    reads the two numbers to know by how much), streamed or not; vLLM's own says neither."""
    models = httpx.get(vllm_engine.base_url + "/v1/models", headers=vllm_engine.headers, timeout=30).json()
    context = next(card["max_model_len"] for card in models["data"] if card["id"] == vllm_engine.model)
    request = dict(model=vllm_engine.model, max_tokens=8000,
                   messages=[{"role": "user", "content": "hello world " * context}])  # several tokens a repeat
    for send in (claude.messages.create, lambda **body: claude.messages.stream(**body).__enter__()):
        with pytest.raises(anthropic.BadRequestError) as raised:
            send(**request)
        assert raised.value.body["error"]["type"] == "invalid_request_error"
        message = raised.value.body["error"]["message"]
        assert message.startswith("prompt is too long"), message
        found = re.search(r"prompt is too long[^0-9]*(\d+)\s*tokens?\s*>\s*(\d+)", message, re.IGNORECASE)
        assert found and int(found.group(1)) > context and int(found.group(2)) == context, message


def test_x_api_key_authenticates_like_older_sdks_send_it(gateway_url, vllm_engine):
    older = anthropic.Anthropic(base_url=gateway_url, api_key=None, auth_token=None,
                                default_headers={"X-Api-Key": KEY_B, "anthropic-version": "2023-06-01"},
                                max_retries=0)
    assert older.messages.create(**greedy(vllm_engine, 4)).usage.output_tokens == 4
    wrong = anthropic.Anthropic(base_url=gateway_url, api_key=None, auth_token=None,
                                default_headers={"X-Api-Key": "sk-nope"}, max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as refused:
        wrong.messages.create(**greedy(vllm_engine, 4))
    assert refused.value.body == {"type": "error", "error": {"type": "authentication_error",
                                                             "message": "invalid API key"}}


def test_beta_query_and_headers_are_accepted(claude, gateway_url, vllm_engine):
    message = claude.beta.messages.create(**greedy(vllm_engine, 4), betas=["prompt-caching-2024-07-31"])
    assert message.usage.output_tokens == 4
    answer = httpx.post(gateway_url + "/v1/messages/count_tokens?beta=true", json={"model": "stack-2.9",
                        "messages": HELLO}, headers={"x-api-key": KEY_A, "anthropic-version": "2023-06-01",
                                                     "anthropic-beta": "token-counting-2024-11-01"}, timeout=30)
    assert answer.status_code == 200 and answer.json()["input_tokens"] > 0


def test_unknown_model_in_anthropics_error_shape(claude):
    with pytest.raises(anthropic.NotFoundError) as refused:
        claude.messages.create(model="nope", max_tokens=4, messages=HELLO)
    assert refused.value.body["type"] == "error" and refused.value.body["error"]["type"] == "not_found_error"
    assert "nope" in refused.value.body["error"]["message"]


def test_tokens_are_counted_per_key(claude, gateway_url, vllm_engine):
    before = gateway_tokens(gateway_url, KEY_A)
    plain = claude.messages.create(**greedy(vllm_engine, 5))
    with claude.messages.stream(**greedy(vllm_engine, 7)) as stream:
        streamed = stream.get_final_message()
    after = gateway_tokens(gateway_url, KEY_A)
    assert after["prompt"] - before["prompt"] == plain.usage.input_tokens + streamed.usage.input_tokens
    assert after["completion"] - before["completion"] == 5 + 7


def test_a_client_that_leaves_a_stream_aborts_the_engine(gateway_url, idle_vllm_engine):
    engine = idle_vllm_engine
    # Greedy, this prompt runs the whole 8000 tokens (the Messages API has no ignore_eos). The engine
    # generates them in seconds while vLLM's Anthropic conversion streams them for a minute, so the
    # evidence of the abort is the engine's generated-token count, not a running request.
    body = {"model": engine.model, "max_tokens": 8000, "messages": HELLO, "stream": True, "temperature": 0}
    before = engine.metrics()[GENERATED]
    with httpx.stream("POST", gateway_url + "/v1/messages", json=body, headers={"x-api-key": KEY_A},
                      timeout=60) as reply:
        seen = [line for _, line in zip(range(30), reply.iter_lines(), strict=False)]
        assert "event: content_block_delta" in seen
    engine.wait_until_nothing_runs(timeout=15)
    generated = engine.metrics()[GENERATED] - before
    assert 0 < generated < 8000


def test_a_cancelled_stream_reports_the_tokens_generated_so_far(claude, gateway_url, idle_vllm_engine):
    """The cancelled ending's ``message_delta`` usage is cumulative: the SDK's total is what was generated, not 0."""
    engine, session = idle_vllm_engine, "claude-cancel-usage"
    before = engine.metrics()[GENERATED]
    deltas, cancel = 0, None
    with claude.messages.stream(model=engine.model, max_tokens=4000, messages=HELLO,
                                extra_body={"temperature": 0, "session_id": session}) as stream:
        for event in stream:
            if event.type == "content_block_delta":
                deltas += 1
                if deltas == 5:
                    cancel = httpx.post(f"{gateway_url}/v1/cancel/{session}", headers=headers(), timeout=30)
        final = stream.get_final_message()
    engine.wait_until_nothing_runs(timeout=15)
    generated = engine.metrics()[GENERATED] - before
    assert cancel is not None and cancel.json()["cancelled"] is True
    assert final.stop_reason == "cancelled"
    # Each delta carries at least one token; the engine generated at least what was streamed.
    assert deltas <= final.usage.output_tokens <= generated < 4000


@pytest.mark.parametrize(("body", "says"), [
    ('{"model": "qwen3-embedded", "messages": []}', "max_tokens"),                    # the gateway's check
    ('{"model": "qwen3-embedded", "max_tokens": "x", "messages": []}', "max_tokens"),
    ('{"max_tokens": 4, "messages": []}', "model"),
    ('{"model": "qwen3-embedded", "max_tokens": 4, "messages": [], "stream": "yes"}', "stream"),
    ('{"model": "qwen3-embedded", "max_tokens": 4, "messages": [{"role": "bot", "content": "x"}]}',
     "messages.0.role"),                                                                 # the engine's check
    ('{"model": "qwen3-embedded", "max_tokens": 4, "temperature": "hot", "messages": [{"role": "user", '
     '"content": "x"}]}', "temperature"),
    ('{"model": "qwen3-embedded", "max_tokens": 4, "top_k": 100000000000000000000, "messages": []}', "top_k"),
    ('{"model": "qwen3-embedded", "max_tokens": 4, "temperature": 1.5, "messages": [{"role": "user", '
     '"content": "x"}]}', "temperature: range: 0..1"),                                 # vLLM takes it: the gateway
    ('{"model": "qwen3-embedded", "max_tokens": ', "JSON"),
    ('{"model": "qwen3-embedded", "max_tokens": 4, "messages": []}', "messages: at least one message is required"),
    ('{"model": "qwen3-embedded", "max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "document", '
     '"source": {"type": "text", "media_type": "text/plain", "data": "x"}}]}]}',
     "messages.0.content.0.type: Input should be 'text', 'image'"),                       # what it takes, not a string
])
def test_bad_input_is_anthropics_400_naming_the_field(gateway_url, body, says):
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        if path.endswith("count_tokens") and says in ("max_tokens", "stream", "messages.0.role", "temperature",
                                                      "temperature: range: 0..1"):
            continue
        answer = httpx.post(gateway_url + path, content=body, headers={"x-api-key": KEY_A,
                                                                        "content-type": "application/json"}, timeout=30)
        assert answer.status_code == 400, answer.text
        payload = answer.json()
        assert payload["type"] == "error" and payload["error"]["type"] == "invalid_request_error"
        assert says in payload["error"]["message"], payload


def test_a_temperature_past_anthropics_range_is_a_bad_request_in_the_sdk(claude, vllm_engine):
    with pytest.raises(anthropic.BadRequestError) as too_hot:
        claude.messages.create(model=vllm_engine.model, max_tokens=4, messages=HELLO, extra_body={"temperature": 1.01})
    assert too_hot.value.body["error"] == {"type": "invalid_request_error", "message": "temperature: range: 0..1"}
    # Its bounds are Anthropic's range; a mid-conversation "system" message (Claude Code sends one) is taken.
    with_system = [*HELLO, {"role": "system", "content": "Be brief."}]
    assert claude.messages.create(model=vllm_engine.model, max_tokens=2, messages=with_system,
                                  extra_body={"temperature": 1}).usage.output_tokens == 2


def test_gateway_side_errors_use_anthropics_envelope(vllm_engine, tmp_path):
    settings = surface_settings(vllm_engine, tmp_path, max_body_bytes=4096, max_inflight_per_key=1,
                                flow_control=False)  # (on, a request at the cap waits instead)
    with run_uvicorn(create_app(settings)) as url:
        claude = anthropic.Anthropic(base_url=url, api_key=KEY_A, max_retries=0)
        with pytest.raises(anthropic.AuthenticationError) as missing:
            httpx_raise(httpx.post(url + "/v1/messages", json={}, timeout=10))
        with pytest.raises(anthropic.APIStatusError) as too_large:
            claude.messages.create(model=vllm_engine.model, max_tokens=4,
                                   messages=[{"role": "user", "content": "x" * 8000}])
        with claude.messages.stream(**greedy(vllm_engine, 2000), extra_headers={}) as held:
            next(iter(held))  # this key's one slot is taken while the stream runs
            with pytest.raises(anthropic.RateLimitError) as limited:
                claude.messages.create(**greedy(vllm_engine, 4))
    assert missing.value.body["error"]["type"] == "authentication_error"
    assert too_large.value.status_code == 413 and too_large.value.body["error"]["type"] == "request_too_large"
    assert limited.value.body["error"]["type"] == "rate_limit_error"


def httpx_raise(response: httpx.Response) -> None:
    """Raise what the anthropic SDK raises for ``response`` (for requests the SDK cannot send unauthenticated)."""
    if response.status_code == 401:
        raise anthropic.AuthenticationError("unauthenticated", response=response, body=response.json())


def test_engine_down_is_a_503_overloaded_error(vllm_engine, tmp_path):
    target = urlparse(vllm_engine.base_url)
    proxy = TcpProxy(target.hostname, target.port).start()
    try:
        with run_uvicorn(create_app(surface_settings(vllm_engine, tmp_path, vllm_base_url=proxy.url))) as url:
            claude = anthropic.Anthropic(base_url=url, api_key=KEY_A, max_retries=0)
            assert claude.messages.create(**greedy(vllm_engine, 2)).usage.output_tokens == 2
            proxy.stop()
            with pytest.raises(anthropic.InternalServerError) as down:
                claude.messages.create(**greedy(vllm_engine, 2))
    finally:
        with contextlib.suppress(Exception):
            proxy.shutdown()
    assert down.value.status_code == 503 and down.value.body["error"]["type"] == "overloaded_error"


def test_a_dropped_stream_resumes_with_no_text_repeated_or_missing(claude, gateway_url, vllm_engine):
    """A named session (``session_id``) outlives its dropped connection; ``Last-Event-ID`` gives the rest."""
    session = "claude-resume-1"
    request = dict(model=vllm_engine.model, max_tokens=400, messages=HELLO,
                   extra_body={"temperature": 0, "session_id": session})
    cut = random.Random(20261204).randint(5, 20)  # the same on every run
    first = []
    stream = claude.messages.create(**request, stream=True)
    for event in stream:
        first.append(event)
        if len(first) == cut:
            break
    stream.close()  # the connection drops; the generation goes on
    assert len(first) == cut  # (the drop came before the end)
    # The SDK ignores the events' ids: event n of a stream is index n, so the last one received is cut - 1.
    rest = list(claude.messages.create(**request, stream=True, extra_headers={"Last-Event-ID": f"{session}:{cut - 1}"}))
    whole = first + rest
    kinds = [event.type for event in whole]
    assert kinds[0] == "message_start" and kinds.count("message_start") == 1 and kinds[-1] == "message_stop"
    text = "".join(event.delta.text for event in whole if event.type == "content_block_delta")
    # The session's log, from its start, with its ids: the same events, numbered without a gap.
    log = httpx.get(f"{gateway_url}/v1/sessions/{session}/events", headers={"x-api-key": KEY_A}, timeout=60).text
    ids = [line[4:] for line in log.splitlines() if line.startswith("id: ")]
    assert ids == [f"{session}:{index}" for index in range(len(whole))]
    assert text_of(sse_events(log)) == text
    # An uninterrupted greedy run of the same request (the engine alone: reproducible) says the same.
    assert text == claude.messages.create(**greedy(vllm_engine, 400)).content[0].text and len(text) > 0
