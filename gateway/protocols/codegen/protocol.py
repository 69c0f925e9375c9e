"""Request and response schemas of the Stack 2.9 code API, and how requests map to vLLM.

Field names and defaults follow the Stack 2.9 contract that existing clients use. The
sampling fields whose defaults come from settings (``max_tokens``, ``temperature``,
``top_p``) are ``None`` in the schema and filled by ``resolve_sampling``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, field_validator

from gateway.config import Settings
from gateway.http.inputs import has_lone_surrogate
from gateway.protocols.codegen.extract import code_of, extract_code_blocks

# vLLM treats any temperature below this as greedy decoding (vllm.sampling_params._SAMPLING_EPS)
# and then refuses n > 1, so the gateway must recognise greedy requests with the same cut-off.
GREEDY_TEMPERATURE_EPSILON = 1e-5

MaxTokens = Annotated[
    int | None, Field(ge=1, le=4096, description="Default: DEFAULT_MAX_TOKENS (512).")
]
Temperature = Annotated[
    float | None, Field(ge=0.0, le=2.0, description="Default: DEFAULT_TEMPERATURE (0.2).")
]
TopP = Annotated[float | None, Field(ge=0.0, le=1.0, description="Default: DEFAULT_TOP_P (0.95).")]


def _text(value: str) -> str:
    """Text the engine can be sent and an answer can echo: JSON's lone ``"\\ud800"`` is no UTF-8."""
    if has_lone_surrogate(value):
        raise ValueError("must not contain lone surrogates (\\ud800 to \\udfff): they are no text")
    return value


def _optional_language(value: str | None) -> str | None:
    """A requested language tag, None for no preference; refuses anything not name-like."""
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    if len(value) > 32 or not all(ch.isalnum() or ch in "_+#.-" for ch in value):
        raise ValueError("must be a language name such as 'python', or null for any language")
    return value


class GenerateRequest(BaseModel):
    prompt: str
    max_tokens: MaxTokens = None
    temperature: Temperature = None
    top_p: TopP = None
    do_sample: bool = True
    repetition_penalty: float = Field(1.1, ge=1.0, le=2.0)
    num_return_sequences: int = Field(1, ge=1, le=10)
    language: str | None = Field(
        "python", description="Preferred language for /generate's code extraction; null: any."
    )
    all_blocks: bool = Field(False, description="/generate returns every block, joined.")

    @field_validator("prompt")
    @classmethod
    def _prompt_not_blank(cls, value: str) -> str:
        _text(value)
        if not value.strip():
            raise ValueError("prompt must not be empty")
        return value  # sent as written: leading/trailing whitespace can matter to a completion

    @field_validator("language")
    @classmethod
    def _language(cls, value: str | None) -> str | None:
        return _optional_language(value)


class GenerateResponse(BaseModel):
    generated_text: str = Field(description="The first sequence (code only, on /generate).")
    prompt: str
    model: str
    num_tokens: int = Field(description="Completion tokens the engine generated (its usage).")
    finish_reason: str = Field(description="The engine's finish reason: 'stop' or 'length'.")
    generated_texts: list[str] = Field(
        default_factory=list, description="Every sequence, in order; the first is generated_text."
    )


class ChatMessage(BaseModel):
    role: Literal["user", "assistant", "system"]
    content: str

    _content = field_validator("content")(_text)


class ChatRequest(BaseModel):
    messages: list[ChatMessage]
    max_tokens: MaxTokens = None
    temperature: Temperature = None
    top_p: TopP = None
    # Accepted by the old service's /chat too; honoured here rather than ignored.
    do_sample: bool = True
    repetition_penalty: float | None = Field(None, ge=1.0, le=2.0)


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatResponse(BaseModel):
    message: AssistantMessage
    model: str
    num_tokens: int
    finish_reason: str


class ExtractCodeRequest(BaseModel):
    prompt: str = Field(description="The text to extract code from.")
    language: str | None = "python"
    all_blocks: bool = False

    _prompt = field_validator("prompt")(_text)

    @field_validator("language")
    @classmethod
    def _language(cls, value: str | None) -> str | None:
        return _optional_language(value)


class CodeBlockOut(BaseModel):
    language: str | None
    code: str


class ExtractCodeResponse(BaseModel):
    code: str
    # Clients of the old API get exactly {"code": ...}; "blocks" only when all_blocks asked.
    blocks: list[CodeBlockOut] | None = Field(None, exclude_if=lambda blocks: blocks is None)


class ModelInfoResponse(BaseModel):
    model_path: str
    device: str
    dtype: str


def resolve_sampling(req: GenerateRequest | ChatRequest, settings: Settings) -> dict[str, Any]:
    """The vLLM sampling parameters for a request, its missing values taken from settings."""
    max_tokens = req.max_tokens if req.max_tokens is not None else settings.default_max_tokens
    temperature = req.temperature if req.temperature is not None else settings.default_temperature
    top_p = req.top_p if req.top_p is not None else settings.default_top_p
    do_sample = getattr(req, "do_sample", True)

    # top_p 0 keeps only the most likely token, which is greedy decoding; vLLM refuses it as
    # a value (it wants (0, 1]), so it is sent as the greedy setting it means.
    greedy = not do_sample or temperature < GREEDY_TEMPERATURE_EPSILON or top_p == 0.0
    params: dict[str, Any] = {"max_tokens": max_tokens}
    if greedy:
        params.update(temperature=0.0, top_p=1.0)
    else:
        params.update(temperature=temperature, top_p=top_p)

    if isinstance(req, GenerateRequest):
        # Greedy decoding has one answer and vLLM refuses n > 1 with it: ask once and let
        # fill_return_sequences repeat it.
        params["n"] = 1 if greedy else req.num_return_sequences
    if req.repetition_penalty is not None:
        params["repetition_penalty"] = req.repetition_penalty
    return params


def fill_return_sequences(texts: list[str], *, requested: int) -> list[str]:
    """The sequences to return: the engine's, the first repeated when greedy asked for one."""
    if not texts:
        return texts
    return texts + [texts[0]] * (requested - len(texts))


def validate_conversation(messages: list[ChatMessage]) -> str | None:
    """The 400 detail for a conversation /chat cannot answer, or None when it can."""
    if not messages:
        return "messages must contain at least one message"
    if messages[-1].role != "user":
        return "Last message must be from user"
    return None


def extract_code_response(req: ExtractCodeRequest) -> ExtractCodeResponse:
    """The /extract-code answer: the chosen code, plus the blocks it came from when asked."""
    blocks = extract_code_blocks(req.prompt, language=req.language)
    code = code_of(req.prompt, blocks, all_blocks=req.all_blocks)
    if not req.all_blocks:
        return ExtractCodeResponse(code=code)
    return ExtractCodeResponse(
        code=code, blocks=[CodeBlockOut(language=b.language, code=b.code) for b in blocks]
    )
