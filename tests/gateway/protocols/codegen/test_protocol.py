"""Code API schemas: contract defaults, bounds that name the field, and the vLLM mapping."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI
from pydantic import ValidationError

from gateway.config import Settings
from gateway.protocols.codegen.protocol import (
    AssistantMessage,
    ChatMessage,
    ChatRequest,
    ChatResponse,
    ExtractCodeRequest,
    ExtractCodeResponse,
    GenerateRequest,
    GenerateResponse,
    ModelInfoResponse,
    extract_code_response,
    fill_return_sequences,
    resolve_sampling,
    validate_conversation,
)


@pytest.fixture
def settings() -> Settings:
    return Settings(default_max_tokens=512, default_temperature=0.2, default_top_p=0.95)


def _error_locations(exc: ValidationError) -> list[tuple]:
    return [error["loc"] for error in exc.errors()]


# --- GenerateRequest -----------------------------------------------------------------------


def test_generate_request_defaults_follow_the_contract() -> None:
    req = GenerateRequest(prompt="def two_sum(nums, target):")
    assert req.model_dump() == {
        "prompt": "def two_sum(nums, target):",
        "max_tokens": None,  # DEFAULT_MAX_TOKENS, filled by resolve_sampling
        "temperature": None,  # DEFAULT_TEMPERATURE
        "top_p": None,  # DEFAULT_TOP_P
        "do_sample": True,
        "repetition_penalty": 1.1,
        "num_return_sequences": 1,
        "language": "python",
        "all_blocks": False,
    }


def test_contract_defaults_come_from_settings(settings: Settings) -> None:
    params = resolve_sampling(GenerateRequest(prompt="x"), settings)
    assert params == {
        "max_tokens": 512,
        "temperature": 0.2,
        "top_p": 0.95,
        "n": 1,
        "repetition_penalty": 1.1,
    }


def test_defaults_follow_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEFAULT_MAX_TOKENS", "128")
    monkeypatch.setenv("DEFAULT_TEMPERATURE", "0.7")
    monkeypatch.setenv("DEFAULT_TOP_P", "0.5")
    params = resolve_sampling(GenerateRequest(prompt="x"), Settings())
    assert (params["max_tokens"], params["temperature"], params["top_p"]) == (128, 0.7, 0.5)


def test_request_values_override_settings(settings: Settings) -> None:
    req = GenerateRequest(prompt="x", max_tokens=64, temperature=1.3, top_p=0.8)
    params = resolve_sampling(req, settings)
    assert (params["max_tokens"], params["temperature"], params["top_p"]) == (64, 1.3, 0.8)


def test_explicit_null_means_the_default(settings: Settings) -> None:
    req = GenerateRequest.model_validate(
        {"prompt": "x", "max_tokens": None, "temperature": None, "top_p": None}
    )
    assert resolve_sampling(req, settings)["max_tokens"] == 512


@pytest.mark.parametrize("prompt", ["", "   ", "\n\t "])
def test_blank_prompt_is_refused_naming_prompt(prompt: str) -> None:
    with pytest.raises(ValidationError) as caught:
        GenerateRequest(prompt=prompt)
    assert _error_locations(caught.value) == [("prompt",)]
    assert "prompt must not be empty" in str(caught.value)


def test_prompt_is_kept_as_written() -> None:
    assert GenerateRequest(prompt="  def f(\n").prompt == "  def f(\n"


BAD_VALUES = [
    ("max_tokens", 0),
    ("max_tokens", 4097),
    ("max_tokens", "many"),
    ("temperature", -0.1),
    ("temperature", 2.01),
    ("top_p", -0.01),
    ("top_p", 1.01),
    ("repetition_penalty", 0.99),
    ("repetition_penalty", 2.01),
    ("num_return_sequences", 0),
    ("num_return_sequences", 11),
    ("do_sample", "perhaps"),
    ("language", "python; rm -rf /"),
    ("language", "x" * 33),
    ("all_blocks", "sometimes"),
]


@pytest.mark.parametrize(("field", "value"), BAD_VALUES)
def test_out_of_bounds_values_are_refused_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(ValidationError) as caught:
        GenerateRequest.model_validate({"prompt": "x", field: value})
    assert _error_locations(caught.value) == [(field,)]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_tokens", 1),
        ("max_tokens", 4096),
        ("temperature", 0.0),
        ("temperature", 2.0),
        ("top_p", 0.0),
        ("top_p", 1.0),
        ("repetition_penalty", 1.0),
        ("repetition_penalty", 2.0),
        ("num_return_sequences", 1),
        ("num_return_sequences", 10),
    ],
)
def test_bounds_are_inclusive(field: str, value: object) -> None:
    assert getattr(GenerateRequest.model_validate({"prompt": "x", field: value}), field) == value


@pytest.mark.parametrize(
    ("language", "stored"), [("py", "py"), (" Python ", "Python"), ("c++", "c++"), ("", None)]
)
def test_language_is_a_name_or_none(language: str, stored: str | None) -> None:
    assert GenerateRequest(prompt="x", language=language).language == stored


# --- greedy decoding and n ----------------------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [
        {"do_sample": False},
        {"do_sample": False, "temperature": 1.5, "top_p": 0.3},
        {"temperature": 0.0},
        {"temperature": 0.000001},
        {"top_p": 0.0},
    ],
)
def test_greedy_requests_map_to_temperature_zero_and_top_p_one(
    fields: dict, settings: Settings
) -> None:
    params = resolve_sampling(GenerateRequest(prompt="x", **fields), settings)
    assert (params["temperature"], params["top_p"]) == (0.0, 1.0)


def test_zero_default_temperature_is_greedy() -> None:
    params = resolve_sampling(GenerateRequest(prompt="x"), Settings(default_temperature=0.0))
    assert (params["temperature"], params["top_p"]) == (0.0, 1.0)


def test_sampling_keeps_temperature_and_top_p(settings: Settings) -> None:
    params = resolve_sampling(GenerateRequest(prompt="x", temperature=0.01, top_p=0.01), settings)
    assert (params["temperature"], params["top_p"]) == (0.01, 0.01)


def test_num_return_sequences_becomes_n(settings: Settings) -> None:
    params = resolve_sampling(GenerateRequest(prompt="x", num_return_sequences=4), settings)
    assert params["n"] == 4


def test_greedy_asks_the_engine_once_and_the_answer_is_repeated(settings: Settings) -> None:
    req = GenerateRequest(prompt="x", do_sample=False, num_return_sequences=3)
    assert resolve_sampling(req, settings)["n"] == 1  # vLLM refuses n > 1 with greedy decoding
    assert fill_return_sequences(["a"], requested=req.num_return_sequences) == ["a", "a", "a"]


@pytest.mark.parametrize(
    ("texts", "requested", "expected"),
    [
        (["a", "b"], 2, ["a", "b"]),
        (["a"], 1, ["a"]),
        ([], 3, []),
        (["a", "b", "c"], 2, ["a", "b", "c"]),
    ],
)
def test_fill_return_sequences_leaves_full_answers_alone(
    texts: list[str], requested: int, expected: list[str]
) -> None:
    assert fill_return_sequences(texts, requested=requested) == expected


def test_repetition_penalty_passes_through(settings: Settings) -> None:
    params = resolve_sampling(GenerateRequest(prompt="x", repetition_penalty=1.7), settings)
    assert params["repetition_penalty"] == 1.7


# --- chat --------------------------------------------------------------------------------


def test_chat_request_defaults_and_sampling(settings: Settings) -> None:
    req = ChatRequest(messages=[{"role": "user", "content": "How do I reverse a string?"}])
    assert (req.max_tokens, req.temperature, req.top_p) == (None, None, None)
    # No n and no repetition penalty: chat keeps the engine's defaults for those.
    assert resolve_sampling(req, settings) == {"max_tokens": 512, "temperature": 0.2, "top_p": 0.95}


def test_chat_temperature_zero_is_greedy(settings: Settings) -> None:
    req = ChatRequest(messages=[{"role": "user", "content": "hi"}], temperature=0)
    assert resolve_sampling(req, settings)["top_p"] == 1.0


def test_chat_honours_the_old_services_do_sample_and_repetition_penalty(settings: Settings) -> None:
    req = ChatRequest(messages=[{"role": "user", "content": "hi"}], do_sample=False, repetition_penalty=1.3)
    params = resolve_sampling(req, settings)
    assert (params["temperature"], params["top_p"], params["repetition_penalty"]) == (0.0, 1.0, 1.3)
    with pytest.raises(ValidationError) as caught:
        ChatRequest(messages=[{"role": "user", "content": "hi"}], repetition_penalty=3)
    assert _error_locations(caught.value) == [("repetition_penalty",)]


def test_chat_role_outside_the_contract_is_refused_naming_the_message() -> None:
    with pytest.raises(ValidationError) as caught:
        ChatRequest(messages=[{"role": "user", "content": "a"}, {"role": "tool", "content": "b"}])
    assert _error_locations(caught.value) == [("messages", 1, "role")]


@pytest.mark.parametrize(("field", "value"), [("max_tokens", 0), ("temperature", 3), ("top_p", 2)])
def test_chat_bounds_name_the_field(field: str, value: object) -> None:
    with pytest.raises(ValidationError) as caught:
        ChatRequest.model_validate({"messages": [], field: value})
    assert _error_locations(caught.value) == [(field,)]


@pytest.mark.parametrize(
    ("roles", "error"),
    [
        ([], "messages must contain at least one message"),
        (["user", "assistant"], "Last message must be from user"),
        (["system"], "Last message must be from user"),
        (["user"], None),
        (["system", "user", "assistant", "user"], None),
    ],
)
def test_validate_conversation(roles: list[str], error: str | None) -> None:
    messages = [ChatMessage(role=role, content="text") for role in roles]
    assert validate_conversation(messages) == error


def test_chat_response_shape() -> None:
    response = ChatResponse(
        message=AssistantMessage(content="Use s[::-1]"),
        model="stack-2.9",
        num_tokens=5,
        finish_reason="stop",
    )
    assert response.model_dump() == {
        "message": {"role": "assistant", "content": "Use s[::-1]"},
        "model": "stack-2.9",
        "num_tokens": 5,
        "finish_reason": "stop",
    }


# --- responses ----------------------------------------------------------------------------


def test_generate_response_lists_every_sequence() -> None:
    response = GenerateResponse(
        generated_text="a",
        prompt="p",
        model="m",
        num_tokens=7,
        finish_reason="length",
        generated_texts=["a", "b"],
    )
    assert response.model_dump() == {
        "generated_text": "a",
        "prompt": "p",
        "model": "m",
        "num_tokens": 7,
        "finish_reason": "length",
        "generated_texts": ["a", "b"],
    }


def test_model_info_fields() -> None:
    info = ModelInfoResponse(model_path="m", device="cuda", dtype="bfloat16")
    assert info.model_dump() == {"model_path": "m", "device": "cuda", "dtype": "bfloat16"}


HELLO = "Here is the code:\n```python\nprint('Hello, World!')\n```"


def test_extract_code_response_is_exactly_code_by_default() -> None:
    response = extract_code_response(ExtractCodeRequest(prompt=HELLO))
    assert response.model_dump(mode="json") == {"code": "print('Hello, World!')"}


def test_extract_code_response_lists_blocks_when_asked() -> None:
    text = "```bash\nls\n```\n```py\na\n```\n```python\nb\n```"
    response = extract_code_response(ExtractCodeRequest(prompt=text, all_blocks=True))
    assert response.model_dump(mode="json") == {
        "code": "a\n\nb",
        "blocks": [{"language": "python", "code": "a"}, {"language": "python", "code": "b"}],
    }
    everything = extract_code_response(
        ExtractCodeRequest(prompt=text, language=None, all_blocks=True)
    )
    assert [block.language for block in everything.blocks] == ["bash", "python", "python"]


def test_extract_code_response_without_fences_is_the_stripped_text() -> None:
    response = extract_code_response(ExtractCodeRequest(prompt="  x = 1\n", all_blocks=True))
    assert response.model_dump(mode="json") == {"code": "x = 1", "blocks": []}


# --- through FastAPI: the 422 body names the field and responses keep their shape ----------


@pytest.fixture
def app() -> FastAPI:
    app = FastAPI()

    @app.post("/generate")
    async def generate(req: GenerateRequest) -> dict:
        return req.model_dump()

    @app.post("/chat")
    async def chat(req: ChatRequest) -> dict:
        return req.model_dump()

    @app.post("/extract-code", response_model=ExtractCodeResponse)
    async def extract(req: ExtractCodeRequest) -> ExtractCodeResponse:
        return extract_code_response(req)

    return app


@pytest.fixture
async def schema_client(app: FastAPI):
    """The schemas behind a bare FastAPI app (the name differs from the gateway-wide ``client``)."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        yield client


@pytest.mark.parametrize(
    ("body", "location"),
    [
        ({}, ["body", "prompt"]),
        ({"prompt": "  "}, ["body", "prompt"]),
        ({"prompt": "x", "max_tokens": 5000}, ["body", "max_tokens"]),
        ({"prompt": "x", "temperature": 2.5}, ["body", "temperature"]),
        ({"prompt": "x", "num_return_sequences": 11}, ["body", "num_return_sequences"]),
    ],
)
async def test_generate_422_names_the_field(
    schema_client: httpx.AsyncClient, body: dict, location: list
) -> None:
    response = await schema_client.post("/generate", json=body)
    assert response.status_code == 422
    assert [error["loc"] for error in response.json()["detail"]] == [location]


async def test_generate_accepts_the_documented_example(schema_client: httpx.AsyncClient) -> None:
    body = {"prompt": "def two_sum(nums, target):", "max_tokens": 256, "temperature": 0.2}
    response = await schema_client.post("/generate", json=body)
    assert response.status_code == 200
    assert response.json()["max_tokens"] == 256


async def test_chat_422_names_the_message_role(schema_client: httpx.AsyncClient) -> None:
    response = await schema_client.post("/chat", json={"messages": [{"role": "robot", "content": "x"}]})
    assert response.status_code == 422
    locations = [error["loc"] for error in response.json()["detail"]]
    assert locations == [["body", "messages", 0, "role"]]


async def test_extract_code_json_has_no_blocks_key_unless_asked(schema_client: httpx.AsyncClient) -> None:
    plain = await schema_client.post("/extract-code", json={"prompt": HELLO})
    assert plain.json() == {"code": "print('Hello, World!')"}
    with_blocks = await schema_client.post("/extract-code", json={"prompt": HELLO, "all_blocks": True})
    assert with_blocks.json() == {
        "code": "print('Hello, World!')",
        "blocks": [{"language": "python", "code": "print('Hello, World!')"}],
    }
