"""The one table of the engine API as the gateway serves it: every route relayed, added, admin-only or refused.

An allow-list: the gateway serves a path of the engine's only when a row here says how.
Each protocol package builds its raw routes from its own rows (``bind``), so a path is
declared once; ``docs/api.md`` shows the same table and a test keeps the two equal.

- ``relayed``: the engine serves it; the gateway relays it with its auth, admission, request
  id, body limit, metrics, model aliases, abort on client disconnect and per-key usage;
- ``gateway``: the gateway serves it itself (from what it stores, or built on the engine);
- ``admin``: relayed only for an admin key (``ADMIN_API_KEYS``), and only when
  ``ENGINE_ADMIN_ROUTES`` names it; refused otherwise;
- ``refused``: the engine serves it (some only in its dev mode), the gateway never does:
  404 with any key, in the OpenAI error envelope.

The OpenAI paths also answer without ``/v1`` (``aliases``), so an SDK whose ``base_url``
lacks it works as written.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gateway.http.errors import ErrorShape
from gateway.http.raw_routes import RawHandler, RawRoute

RELAYED = "relayed"
GATEWAY = "gateway"
ADMIN = "admin"
REFUSED = "refused"


@dataclass(frozen=True, slots=True)
class EngineRoute:
    method: str
    path: str
    kind: str                      # relayed | gateway | admin | refused
    protocol: str                  # the package that serves it (openai, responses, anthropic, engine_api)
    summary: str
    aliases: tuple[str, ...] = ()


def _openai(method: str, path: str, kind: str, summary: str, protocol: str = "openai") -> EngineRoute:
    """An OpenAI route, also served without its /v1 prefix."""
    return EngineRoute(method, path, kind, protocol, summary, aliases=(path.removeprefix("/v1"),))


def _vllm(path: str, kind: str, summary: str, method: str = "POST") -> EngineRoute:
    return EngineRoute(method, path, kind, "engine_api", summary)


def _refused(path: str, why: str, method: str = "POST") -> EngineRoute:
    return EngineRoute(method, path, REFUSED, "engine_api", why)


ROUTES: tuple[EngineRoute, ...] = (
    # OpenAI's chat and completions (protocols.openai)
    _openai("POST", "/v1/chat/completions", RELAYED, "Create a chat completion"),
    _openai("POST", "/v1/completions", RELAYED, "Create a completion"),
    _openai("GET", "/v1/models", RELAYED, "List the served models and their aliases"),
    _openai("GET", "/v1/models/{model}", GATEWAY, "One served model or alias (vLLM has no such route)"),
    # OpenAI's Responses API (protocols.responses)
    _openai("POST", "/v1/responses", RELAYED, "Create a response (background runs and storage by the gateway)",
            "responses"),
    _openai("GET", "/v1/responses/{response_id}", GATEWAY, "A stored response, or its events (?stream=true)",
            "responses"),
    _openai("POST", "/v1/responses/{response_id}/cancel", GATEWAY, "Cancel a background response", "responses"),
    _openai("DELETE", "/v1/responses/{response_id}", GATEWAY, "Delete a stored response", "responses"),
    # Anthropic's Messages API (protocols.anthropic)
    EngineRoute("POST", "/v1/messages", RELAYED, "anthropic", "Create a message (Anthropic's Messages API)"),
    EngineRoute("POST", "/v1/messages/count_tokens", RELAYED, "anthropic", "Count the tokens of a message"),
    # vLLM's other inference routes (protocols.engine_api)
    _openai("POST", "/v1/embeddings", RELAYED, "Create embeddings (pooling models only)", "engine_api"),
    _vllm("/tokenize", RELAYED, "Tokenize a prompt or a conversation"),
    _vllm("/detokenize", RELAYED, "Turn token ids back into text"),
    _vllm("/v1/rerank", RELAYED, "Rerank documents (scoring models only)"),
    _vllm("/rerank", RELAYED, "Rerank documents (scoring models only)"),
    _vllm("/v1/score", RELAYED, "Score text pairs (scoring models only)"),
    _vllm("/score", RELAYED, "Score text pairs (scoring models only)"),
    _vllm("/pooling", RELAYED, "Pooled hidden states (pooling models only)"),
    _vllm("/classify", RELAYED, "Classify text (classification models only)"),
    _vllm("/v1/audio/transcriptions", RELAYED, "Transcribe audio, multipart (transcription models only)"),
    _vllm("/v1/audio/translations", RELAYED, "Translate audio, multipart (transcription models only)"),
    # The engine's operational routes an admin key may reach (ENGINE_ADMIN_ROUTES)
    _vllm("/reset_prefix_cache", ADMIN, "Reset the engine's prefix cache (vLLM dev mode)"),
    _vllm("/reset_mm_cache", ADMIN, "Reset the engine's multimodal cache (vLLM dev mode)"),
    _vllm("/v1/load_lora_adapter", ADMIN, "Load a LoRA adapter (VLLM_ALLOW_RUNTIME_LORA_UPDATING)"),
    _vllm("/v1/unload_lora_adapter", ADMIN, "Unload a LoRA adapter (VLLM_ALLOW_RUNTIME_LORA_UPDATING)"),
    # Never through the gateway
    _refused("/sleep", "puts the engine to sleep for every client"),
    _refused("/wake_up", "engine process control"),
    _refused("/is_sleeping", "engine process control", "GET"),
    _refused("/release_kv_cache_memory", "engine memory control"),
    _refused("/collective_rpc", "runs any method on every engine worker"),
    _refused("/reset_encoder_cache", "engine cache control"),
    _refused("/start_profile", "profiling"),
    _refused("/stop_profile", "profiling"),
    _refused("/pause", "stops generation for every client"),
    _refused("/resume", "engine process control"),
    _refused("/is_paused", "engine process control", "GET"),
    _refused("/abort_requests", "aborts other clients' requests"),
    _refused("/server_info", "dumps the engine's whole configuration", "GET"),
    _refused("/scale_elastic_ep", "changes the engine's parallelism"),
    _refused("/is_scaling_elastic_ep", "engine process control"),
    _refused("/update_weights", "replaces the model's weights"),
    _refused("/init_weight_transfer_engine", "weight transfer"),
    _refused("/shutdown_weight_transfer_engine", "weight transfer"),
    _refused("/start_weight_update", "weight transfer"),
    _refused("/start_draft_weight_update", "weight transfer"),
    _refused("/finish_weight_update", "weight transfer"),
    _refused("/update_weight_version", "weight transfer"),
    _refused("/weight_info", "weight transfer", "GET"),
    _refused("/weight_checker", "weight transfer"),
    _refused("/get_world_size", "engine topology", "GET"),
    _refused("/adapters", "LoRA adapters (use the admin routes)"),
    _refused("/adapters/{adapter_name}", "LoRA adapters (use the admin routes)", "DELETE"),
    _refused("/fault_tolerance/apply", "engine fault tolerance"),
    _refused("/fault_tolerance/status", "engine fault tolerance", "GET"),
    _refused("/tokenizer_info", "the engine's tokenizer configuration", "GET"),
    _refused("/invocations", "SageMaker's catch-all: a second door to every inference route"),
    _refused("/ping", "SageMaker health check (the gateway has /health)"),
    _refused("/generative_scoring", "not part of the gateway's API"),
    _refused("/v1/systemone", "not part of the gateway's API"),
    _refused("/v1/chat/completions/batch", "not part of the gateway's API"),
    _refused("/v2/embed", "not part of the gateway's API (use /v1/embeddings)"),
    _refused("/v2/rerank", "not part of the gateway's API (use /v1/rerank)"),
    _refused("/inference/v1/generate", "vLLM's token-in, token-out scale-out API"),
    _refused("/inference/v1/abort_requests", "vLLM's scale-out API"),
    _refused("/v1/chat/completions/render", "vLLM's scale-out API"),
    _refused("/v1/completions/render", "vLLM's scale-out API"),
    _refused("/v1/messages/render", "vLLM's scale-out API"),
    _refused("/v1/responses/render", "vLLM's scale-out API"),
    _refused("/v1/chat/completions/derender", "vLLM's scale-out API"),
    _refused("/v1/completions/derender", "vLLM's scale-out API"),
    _refused("/load", "engine load statistics", "GET"),
    _refused("/kv_event_sources", "engine internals", "GET"),
    _refused("/version", "engine internals (the gateway's /health names the model)", "GET"),
)


def rows(protocol: str, *kinds: str) -> list[EngineRoute]:
    """The table's rows served by ``protocol`` (of the given kinds, or all)."""
    return [row for row in ROUTES if row.protocol == protocol and (not kinds or row.kind in kinds)]


def bind(routes: list[EngineRoute], handlers: Mapping[tuple[str, str], RawHandler], *, error_shape: ErrorShape,
         tags: tuple[str, ...], extra: Callable[[EngineRoute], dict[str, Any]] | None = None) -> list[RawRoute]:
    """Raw routes for ``routes``, each served by ``handlers[(method, path)]`` (every row needs one)."""
    bound = []
    for row in routes:
        handler = handlers.get((row.method, row.path))
        if handler is None:
            raise LookupError(f"no handler for {row.method} {row.path}")
        bound.append(RawRoute(row.method, row.path, handler, row.summary, error_shape, tags=tags,
                              aliases=row.aliases, **(extra(row) if extra is not None else {})))
    return bound
