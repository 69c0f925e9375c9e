"""The Python clients people point at their own engines: OpenAI Agents SDK, LangChain, the ``anthropic`` SDK.

Each with its stock settings (docs/clients/) against the gateway and the embedded-model engine:
the Agents SDK with its Responses model and its Chat Completions model, streamed and not, and
runs cut short (by the output limit, by the engine going away) that it must see end, the
streamed run the same way as the non-streamed one;
LangChain's ``ChatOpenAI`` (Chat Completions and Responses) and ``ChatAnthropic``; the
``anthropic`` SDK with an output limit beyond the context (lowered, answered).
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlparse

import anthropic
import httpx
import pytest
from agents import (
    Agent,
    ModelBehaviorError,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    RunConfig,
    Runner,
    set_tracing_disabled,
)
from langchain_anthropic import ChatAnthropic
from langchain_openai import ChatOpenAI
from openai import AsyncOpenAI

from gateway.app import create_app
from gateway.config import Settings
from gateway.protocols.common.budget import HEADER
from tests.clients.conftest import KEY
from tests.support.servers import run_uvicorn
from tests.support.tcp_proxy import TcpProxy

pytestmark = pytest.mark.integration
set_tracing_disabled(True)  # the SDK's tracing exports to OpenAI's servers otherwise


def agent(url: str, model_name: str, kind: str, **settings) -> Agent:
    client = AsyncOpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0)
    model = (OpenAIResponsesModel if kind == "responses" else OpenAIChatCompletionsModel)(model_name, client)
    return Agent(name="helper", instructions="Answer briefly.", model=model,
                 model_settings=ModelSettings(**settings))


@pytest.mark.parametrize("kind", ["responses", "chat"])
async def test_agents_sdk_runs_answer(client_gateway, vllm_engine, kind):
    url, _ = client_gateway
    result = await Runner.run(agent(url, vllm_engine.model, kind), "say hi",
                              run_config=RunConfig(tracing_disabled=True))
    assert isinstance(result.final_output, str) and result.final_output


@pytest.mark.parametrize("kind", ["responses", "chat"])
async def test_agents_sdk_streamed_runs_answer(client_gateway, vllm_engine, kind):
    url, _ = client_gateway
    streamed = Runner.run_streamed(agent(url, vllm_engine.model, kind), "say hi",
                                   run_config=RunConfig(tracing_disabled=True))
    deltas = [event async for event in streamed.stream_events() if event.type == "raw_response_event"]
    assert deltas and isinstance(streamed.final_output, str) and streamed.final_output


# A run the output limit must cut: greedy, and vLLM's ignore_eos so the model cannot end first.
CUT = dict(max_tokens=8, temperature=0, extra_body={"ignore_eos": True})
DEADLINE = 300  # seconds: a run that neither ends nor fails by then is the hang under test


async def streamed_failure(streamed) -> tuple[Exception, list[str]]:
    """The error a streamed run ends with, and the raw event types it saw first (within DEADLINE)."""
    kinds: list[str] = []

    async def consume() -> None:
        async for event in streamed.stream_events():
            if event.type == "raw_response_event":
                kinds.append(event.data.type)

    with pytest.raises(ModelBehaviorError) as caught:
        await asyncio.wait_for(consume(), DEADLINE)
    return caught.value, kinds


async def test_agents_sdk_responses_run_cut_by_the_output_limit_fails_alike_streamed_or_not(client_gateway,
                                                                                           vllm_engine):
    """OpenAI ends a cut stream with response.incomplete, which the SDK fails, as it fails the unary answer."""
    url, _ = client_gateway
    with pytest.raises(ModelBehaviorError) as unary:
        await asyncio.wait_for(Runner.run(agent(url, vllm_engine.model, "responses", **CUT), "Tell me about ships.",
                                          run_config=RunConfig(tracing_disabled=True)), DEADLINE)
    streamed = Runner.run_streamed(agent(url, vllm_engine.model, "responses", **CUT), "Tell me about ships.",
                                   run_config=RunConfig(tracing_disabled=True))
    error, kinds = await streamed_failure(streamed)
    assert "response.output_text.delta" in kinds and kinds[-1] == "response.incomplete"
    assert "`response.incomplete`" in str(error) and "max_output_tokens" in str(error)
    assert str(error) == str(unary.value)


async def test_agents_sdk_chat_run_cut_by_the_output_limit_answers_alike_streamed_or_not(client_gateway,
                                                                                        vllm_engine):
    url, _ = client_gateway
    whole = await Runner.run(agent(url, vllm_engine.model, "chat", **CUT), "Tell me about ships.",
                             run_config=RunConfig(tracing_disabled=True))
    streamed = Runner.run_streamed(agent(url, vllm_engine.model, "chat", **CUT), "Tell me about ships.",
                                   run_config=RunConfig(tracing_disabled=True))
    await asyncio.wait_for(streamed.stream_events().__anext__(), DEADLINE)
    async for _ in streamed.stream_events():
        pass
    assert whole.final_output and streamed.final_output == whole.final_output
    assert whole.raw_responses[0].usage.output_tokens == 8


async def test_agents_sdk_streamed_run_whose_engine_goes_away_fails_instead_of_hanging(vllm_engine, tmp_path):
    """The engine's connection cut mid-answer: error and response.failed end the stream, the SDK raises."""
    target = urlparse(vllm_engine.base_url)
    proxy = TcpProxy(target.hostname, target.port).start()
    settings = Settings(vllm_base_url=proxy.url, vllm_api_key=vllm_engine.api_key, api_keys=[KEY],
                        database_url=f"sqlite+aiosqlite:///{tmp_path}/gateway.db", session_store="sqlite",
                        access_log=False, engine_poll_interval=60, features=["none"])
    try:
        with run_uvicorn(create_app(settings)) as url:
            streamed = Runner.run_streamed(agent(url, vllm_engine.model, "responses", max_tokens=2000,
                                                 extra_body={"ignore_eos": True}),
                                           "Tell me about ships.", run_config=RunConfig(tracing_disabled=True))
            kinds: list[str] = []

            async def consume() -> None:
                async for event in streamed.stream_events():
                    if event.type == "raw_response_event":
                        kinds.append(event.data.type)
                        if event.data.type == "response.output_text.delta" and kinds.count(event.data.type) == 1:
                            proxy.stop()  # the engine vanishes after the first token reached the client

            with pytest.raises(ModelBehaviorError) as caught:
                await asyncio.wait_for(consume(), DEADLINE)
    finally:
        proxy.shutdown()
    assert kinds.count("response.output_text.delta") >= 1 and kinds[-1] == "error"
    assert "stream_interrupted" in str(caught.value)


def test_langchain_chat_openai_over_chat_completions_and_responses(client_gateway, vllm_engine):
    url, recorder = client_gateway
    for responses in (False, True):
        chat = ChatOpenAI(base_url=url + "/v1", api_key=KEY, model=vllm_engine.model, max_tokens=64,
                          use_responses_api=responses, max_retries=0)
        reply = chat.invoke("say hi")
        assert reply.text
        assert "".join(chunk.text for chunk in chat.stream("say hi"))
    paths = {note["path"] for note in recorder.seen}
    assert {"/v1/chat/completions", "/v1/responses"} <= paths


def test_langchain_chat_anthropic(client_gateway, vllm_engine):
    url, _ = client_gateway
    chat = ChatAnthropic(base_url=url, api_key=KEY, model=vllm_engine.model, max_tokens=64, max_retries=0)
    assert chat.invoke("say hi").text
    assert "".join(chunk.text for chunk in chat.stream("say hi"))


def test_anthropic_sdk_output_limit_beyond_the_context_is_lowered_and_answered(client_gateway, vllm_engine):
    url, _ = client_gateway
    # An explicit timeout: the SDK refuses a non-streamed call whose max_tokens could take over 10 minutes.
    client = anthropic.Anthropic(base_url=url, api_key=KEY, max_retries=0, timeout=300)
    cards = httpx.get(url + "/v1/models", headers={"Authorization": f"Bearer {KEY}"}, timeout=30).json()["data"]
    context = cards[0]["max_model_len"]
    raw = client.messages.with_raw_response.create(model=vllm_engine.model, max_tokens=context * 2,
                                                   messages=[{"role": "user", "content": "say hi"}])
    message = raw.parse()
    assert message.content and message.stop_reason in ("end_turn", "max_tokens")
    asked, given = raw.headers[HEADER].removeprefix("max_tokens ").split(" -> ")
    assert int(asked) == context * 2 and int(given) == context - message.usage.input_tokens

