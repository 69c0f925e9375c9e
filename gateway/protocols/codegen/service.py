"""The Stack 2.9 code API, served by vLLM: contract-shaped requests in, engine calls, answers out.

- ``/generate`` and ``/generate/raw`` send the prompt as plain text to the engine's
  ``/v1/completions``, as the old service fed it to its model: a prompt such as
  ``"def two_sum(nums, target):"`` is continued, not answered as a chat turn.
- ``/chat`` sends the conversation to ``/v1/chat/completions``, so the model's own chat
  template frames it; the gateway never builds a prompt out of messages.
- Before generating, the engine's ``/tokenize`` measures the prompt (after the chat
  template, for ``/chat``). A prompt that leaves no room in the context is a 400 naming
  the limit; otherwise ``max_tokens`` is lowered to the room left, and the engine's
  ``finish_reason`` says ``"length"`` when that cut the answer short.
- Engine failures become the contract's errors (see ``codegen_error``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gateway.config import Settings
from gateway.engines.device import reported_device
from gateway.engines.errors import BadGateway, EngineError, EngineHTTPError, EngineTimeout, EngineUnavailable
from gateway.http.context import RequestContext
from gateway.http.errors import GatewayError
from gateway.protocols.codegen.extract import extract_code
from gateway.protocols.codegen.protocol import (
    AssistantMessage,
    ChatRequest,
    ChatResponse,
    GenerateRequest,
    GenerateResponse,
    ModelInfoResponse,
    fill_return_sequences,
    resolve_sampling,
    validate_conversation,
)

MODEL_NOT_LOADED = "Model not loaded. Check /health for status."
UNKNOWN_DTYPE = "auto"
MAX_CONFIG_BYTES = 1024 * 1024  # a checkpoint's config.json is a few KB
# How a too-long-input 400 describes what /tokenize measured, by request field.
MEASURED = {
    "prompt": "'prompt' is",
    "messages": "the conversation ('messages', in the model's chat template) is",
}


# --- the engine ------------------------------------------------------------------
async def require_engine(*, engine) -> None:
    """Return when the engine is ready (looked at again if the last look is stale); 503 otherwise."""
    if not engine.ready:
        await engine.refresh_if_stale()
    if not engine.ready:
        raise GatewayError(503, MODEL_NOT_LOADED, code="engine_not_ready")


def codegen_error(exc: EngineError, *, field: str = "prompt") -> GatewayError:
    """The contract's error for an engine failure: 503, 504, 502 (engine 5xx too) or a 4xx.

    ``field`` is the request field a too-long-context 400 names.
    """
    if isinstance(exc, EngineHTTPError):
        status = exc.upstream_status
        message = exc.message.removeprefix("the inference engine failed: ")
        if status == 503:  # the engine says it cannot serve now: retryable, like not ready
            return GatewayError(503, f"{MODEL_NOT_LOADED} ({message})", code="engine_unavailable")
        if status >= 500:  # the engine's failure, not the gateway's: a bad gateway, as on /v1/...
            return GatewayError(502, f"Generation failed: {message}", code="engine_error")
        if status in (401, 403):  # the gateway's VLLM_API_KEY, not the client, was refused
            return GatewayError(502, f"the inference engine refused the gateway's credentials: {message}")
        if status == 404:  # the engine stopped serving the model between two looks
            return GatewayError(503, f"{MODEL_NOT_LOADED} ({message})", code="engine_not_ready")
        if is_context_length_error(exc):
            return GatewayError(400, f"{field} is too long for the model's context: {message}", param=field)
        return GatewayError(status, f"The engine refused the request: {message}", param=exc.param)
    if isinstance(exc, EngineUnavailable):  # unreachable or refusing connections
        return GatewayError(503, f"{MODEL_NOT_LOADED} ({exc.message})", code="engine_unavailable")
    if isinstance(exc, EngineTimeout):
        return GatewayError(504, f"Generation timed out: {exc.message}", code="engine_timeout")
    return GatewayError(502, exc.message, code=exc.code if isinstance(exc, BadGateway) else "bad_gateway")


def is_context_length_error(exc: EngineHTTPError) -> bool:
    """vLLM's 400 for a prompt longer than the context (the gateway measures first; this is the backstop)."""
    return exc.upstream_status == 400 and (
        exc.param == "input_tokens" or "maximum context length" in exc.message
    )


@contextlib.contextmanager
def engine_errors(*, field: str = "prompt") -> Iterator[None]:
    """Turn every engine failure inside the block into the contract's error."""
    try:
        yield
    except EngineError as exc:
        raise codegen_error(exc, field=field) from exc


async def fit_max_tokens(
    *, upstream, model: str, prompt: dict[str, Any], max_tokens: int, field: str, context: RequestContext | None
) -> int:
    """``max_tokens`` lowered to the room the prompt leaves in the context; 400 when none is left.

    ``prompt`` is what ``/tokenize`` measures: ``{"prompt": text}`` or ``{"messages": [...],
    "add_generation_prompt": True}``. ``field`` is the request field a 400 names.
    """
    try:
        measured = await upstream.post_json(
            "/tokenize", {"model": model, **prompt}, request=context
        )
    except EngineHTTPError as exc:
        if exc.upstream_status == 404:  # an engine without /tokenize: its own check is the backstop
            return max_tokens
        raise
    prompt_tokens, limit = measured.get("count"), measured.get("max_model_len")
    if not isinstance(prompt_tokens, int) or not isinstance(limit, int):
        raise BadGateway("the inference engine's /tokenize answer has no token count or context limit")
    room = limit - prompt_tokens
    if room < 1:
        raise GatewayError(
            400,
            f"{MEASURED[field]} {prompt_tokens} tokens long, but the model's context limit "
            f"(max_model_len) is {limit} tokens for the prompt and the answer together: "
            f"shorten '{field}'",
            param=field,
        )
    return min(max_tokens, room)


def _choices(answer: dict) -> list[dict]:
    choices = answer.get("choices")
    if not isinstance(choices, list) or not choices or not all(isinstance(c, dict) for c in choices):
        raise GatewayError(502, "the inference engine's answer has no choices", code="bad_gateway")
    return sorted(choices, key=lambda choice: choice.get("index", 0))


def _completion_tokens(answer: dict) -> int:
    usage = answer.get("usage")
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if not isinstance(tokens, int):
        raise GatewayError(502, "the inference engine's answer has no token usage", code="bad_gateway")
    return tokens


def _finish_reason(choice: dict) -> str:
    return str(choice.get("finish_reason") or "unknown")


# --- the routes' work ----------------------------------------------------------------
async def generate(
    *, request: GenerateRequest, extract: bool, upstream, engine, settings: Settings,
    context: RequestContext | None = None,
) -> GenerateResponse:
    """Complete a plain-text prompt; with ``extract``, return the code of each sequence."""
    await require_engine(engine=engine)
    model = engine.default_model
    params = resolve_sampling(request, settings)
    with engine_errors():
        params["max_tokens"] = await fit_max_tokens(
            upstream=upstream, model=model, prompt={"prompt": request.prompt},
            max_tokens=params["max_tokens"], field="prompt", context=context,
        )
        answer = await upstream.post_json(
            "/v1/completions", {"model": model, "prompt": request.prompt, **params}, request=context
        )
    choices = _choices(answer)
    texts = [str(choice.get("text") or "") for choice in choices]
    if extract:
        texts = [extract_code(text, language=request.language, all_blocks=request.all_blocks) for text in texts]
    texts = fill_return_sequences(texts, requested=request.num_return_sequences)
    return GenerateResponse(
        generated_text=texts[0],
        prompt=request.prompt,
        model=engine.reported_model,
        num_tokens=_completion_tokens(answer),
        finish_reason=_finish_reason(choices[0]),
        generated_texts=texts,
    )


async def chat(
    *, request: ChatRequest, upstream, engine, settings: Settings, context: RequestContext | None = None
) -> ChatResponse:
    """Answer the conversation's last user message through the model's own chat template."""
    problem = validate_conversation(request.messages)
    if problem is not None:
        raise GatewayError(400, problem, param="messages")
    await require_engine(engine=engine)
    model = engine.default_model
    messages = [message.model_dump() for message in request.messages]
    params = resolve_sampling(request, settings)
    with engine_errors(field="messages"):
        params["max_tokens"] = await fit_max_tokens(
            upstream=upstream, model=model, prompt={"messages": messages, "add_generation_prompt": True},
            max_tokens=params["max_tokens"], field="messages", context=context,
        )
        answer = await upstream.post_json(
            "/v1/chat/completions", {"model": model, "messages": messages, **params}, request=context
        )
    choice = _choices(answer)[0]
    message = choice.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return ChatResponse(
        message=AssistantMessage(content=content or ""),
        model=engine.reported_model,
        num_tokens=_completion_tokens(answer),
        finish_reason=_finish_reason(choice),
    )


async def model_info(*, engine, settings: Settings, dtypes: "CheckpointDtypes") -> ModelInfoResponse:
    """What model is served, on which device, in which dtype."""
    await require_engine(engine=engine)
    return ModelInfoResponse(
        model_path=engine.reported_model,
        device=reported_device(settings),
        dtype=await dtypes.dtype_of(engine.root),
    )


# --- the checkpoint's dtype ----------------------------------------------------------
class CheckpointDtypes:
    """The dtype each served checkpoint declares, read once per checkpoint, off the event loop."""

    def __init__(self) -> None:
        self._by_root: dict[str, str] = {}

    async def dtype_of(self, root: str | None) -> str:
        if not root:
            return UNKNOWN_DTYPE
        if root not in self._by_root:
            self._by_root[root] = await asyncio.to_thread(read_checkpoint_dtype, root)
        return self._by_root[root]


def read_checkpoint_dtype(root: str) -> str:
    """``torch.<dtype>`` from ``root/config.json`` (the old service's spelling); "auto" if unreadable.

    ``root`` is the path the engine loaded; a hub id or a path on another machine has no
    readable config here. The file is read as data only (JSON, size-capped).
    """
    path = Path(root) / "config.json"
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            return UNKNOWN_DTYPE
        config = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return UNKNOWN_DTYPE
    if not isinstance(config, dict):
        return UNKNOWN_DTYPE
    dtype = config.get("dtype") or config.get("torch_dtype")
    if not isinstance(dtype, str) or not dtype.removeprefix("torch.").isidentifier():
        return UNKNOWN_DTYPE
    return dtype if dtype.startswith("torch.") else f"torch.{dtype}"
