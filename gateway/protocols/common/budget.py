"""Output budgets that fit the model's context: one rule for every protocol.

Clients ask for output limits the model cannot give: Claude Code sends ``max_tokens: 32000``
for any model it does not know, agents built for hosted models ask for 64k or more. vLLM
answers such a request with a 400 (``max_completion_tokens=32000 cannot be greater than
max_model_len=...``, naming its own field even on Anthropic's route). OpenAI's and
Anthropic's own APIs instead treat the limit as a ceiling. The gateway does the same:

- an output limit (``max_tokens``, ``max_completion_tokens``, ``max_output_tokens``) that the
  prompt leaves no room for is **lowered** to the room left (context minus prompt tokens), and
  the response says so in ``X-Gateway-Output-Limit-Lowered: <field> <asked> -> <given>``;
- a prompt that leaves no room at all is a 400 in the protocol's own envelope, naming the
  protocol's fields (``context_length_exceeded``), never the engine's.

Cost: nothing is measured when the limit obviously fits. The body's length in bytes plus
the chat template's framing bounds the prompt's tokens (a byte-level BPE never makes more
tokens than bytes; rendering adds at most a quarter, for spaced-out JSON of tools), so a
request whose limit plus that bound is within the context goes on untouched: one ``len``
and a comparison. Only otherwise does the gateway ask the engine to count the prompt
(``/tokenize``, or ``/v1/messages/count_tokens`` for Anthropic), one round trip
(docs/benchmarks.md). When the engine cannot count (an old engine, a failure), the request
goes on as written and the engine's own check remains the backstop.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import orjson

from gateway.core import Core
from gateway.engines.errors import EngineError, EngineHTTPError
from gateway.engines.routing import RouteHints
from gateway.http.context import RequestContext
from gateway.http.errors import GatewayError

HEADER = "x-gateway-output-limit-lowered"
# The chat template's framing (role markers, the tool preamble), in tokens, over the body's bytes.
FRAMING_TOKENS = 1024


@dataclass(frozen=True, slots=True)
class Measured:
    """What the engine counted: the prompt's tokens, and the context it has (when it said)."""

    prompt_tokens: int
    context: int | None = None
    exact: bool = True  # False: an estimate from above (the Responses API has no count route)
    at_least: bool = False  # the engine refused to count past the context: the prompt has at least this many


class ContextExceeded(GatewayError):
    """A prompt that leaves no room for any answer: a 400 ``context_length_exceeded`` naming the
    protocol's fields; the numbers stay with it, for protocols that word it their own way."""

    def __init__(self, message: str, *, prompt_field: str, prompt_tokens: int, at_least: bool, context: int,
                 asked: int) -> None:
        super().__init__(400, message, param=prompt_field, code="context_length_exceeded")
        self.prompt_tokens = prompt_tokens
        self.at_least = at_least
        self.context = context
        self.asked = asked


# vLLM's refusal of a prompt longer than the context (its renderer's wording, also on the routes
# that only count, such as /v1/messages/count_tokens): it counts one token past the context, then stops.
_ENGINE_TOO_LONG = re.compile(r"maximum context length is (\d+) tokens\. However, your prompt contains "
                              r"(at least )?(\d+) input tokens")


Measure = Callable[[], Awaitable[Measured | None]]


@dataclass(frozen=True, slots=True)
class Lowered:
    field: str
    asked: int
    given: int

    @property
    def header(self) -> tuple[str, str]:
        return HEADER, f"{self.field} {self.asked} -> {self.given}"


def prompt_bound(body_bytes: int) -> int:
    """At most this many prompt tokens for a request body of ``body_bytes`` (see the module's docstring)."""
    return body_bytes + body_bytes // 4 + FRAMING_TOKENS


def asked_limits(payload: dict, fields: tuple[str, ...]) -> list[tuple[str, int]]:
    return [(name, value) for name in fields
            if isinstance(value := payload.get(name), int) and not isinstance(value, bool)]


async def fit_output_limit(payload: dict, *, body_bytes: int, fields: tuple[str, ...], prompt_field: str,
                           context: int | None, measure: Measure) -> Lowered | None:
    """Lower the output limits in ``payload`` that the prompt leaves no room for; what was lowered.

    ``fields``: the protocol's output-limit fields present in its requests (the first is the
    one its errors name); ``prompt_field``: where its prompt is (``messages``, ``input``);
    ``context``: the model's context length as last seen (None: unknown, nothing is done).
    Raises a 400 naming both when the prompt alone fills the context.
    """
    asked = asked_limits(payload, fields)
    if not asked or context is None:
        return None
    largest = max(value for _, value in asked)
    if largest + prompt_bound(body_bytes) <= context:
        return None
    measured = await measure()
    if measured is None:
        return None
    context = measured.context or context
    room = context - measured.prompt_tokens
    if room < 1:
        if not measured.exact:  # an estimate from above: the engine's own count decides
            return None
        tokens = f"{'at least ' if measured.at_least else ''}{measured.prompt_tokens}"
        raise ContextExceeded(
            f"the prompt ('{prompt_field}') is {tokens} tokens, which leaves no room for the "
            f"answer ('{fields[0]}') in the model's context of {context} tokens: shorten '{prompt_field}'",
            prompt_field=prompt_field, prompt_tokens=measured.prompt_tokens, at_least=measured.at_least,
            context=context, asked=largest)
    lowered = None
    for name, value in asked:
        if value > room:
            payload[name] = room
            lowered = lowered or Lowered(name, value, room)
    return lowered


# --- how each protocol's prompt is counted ----------------------------------------------------

# The rendering settings /tokenize takes from a chat request, so its count matches the engine's.
RENDERING = ("chat_template", "chat_template_kwargs", "add_special_tokens", "mm_processor_kwargs",
             "continue_final_message", "add_generation_prompt")


async def _count(post_json, path: str, payload: dict, key: str, route) -> Measured | None:
    try:
        answer = await post_json(path, payload, route=route)
    except EngineHTTPError as exc:  # a prompt past the context, which the engine refuses to count, or a failure
        return engine_too_long(exc)
    except EngineError:  # cannot count (no such route, a failure): the engine's own check decides
        return None
    count, context = answer.get(key), answer.get("max_model_len")
    if not isinstance(count, int):
        return None
    return Measured(count, context if isinstance(context, int) else None)


def engine_too_long(error: EngineHTTPError) -> Measured | None:
    """What the engine's refusal of a prompt past the context says of it; None for any other error."""
    found = _ENGINE_TOO_LONG.search(error.message) if error.upstream_status == 400 else None
    if found is None:
        return None
    return Measured(int(found.group(3)), int(found.group(1)), at_least=found.group(2) is not None)


def chat_measure(post_json, payload: dict, *, route=None) -> Measure:
    """A chat completion's prompt, counted by the engine's ``/tokenize`` with its chat template and tools."""
    request = {"model": payload.get("model"), "messages": payload.get("messages"), "add_generation_prompt": True}
    if payload.get("tools"):
        request["tools"] = payload["tools"]
    request.update((name, payload[name]) for name in RENDERING if name in payload)
    return lambda: _count(post_json, "/tokenize", request, "count", route)


def completion_measure(post_json, payload: dict, *, route=None) -> Measure:
    """A completion's prompt: one text counted by ``/tokenize``, token ids counted here; a batch by its longest."""
    prompt = payload.get("prompt")

    async def measure() -> Measured | None:
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            return Measured(len(prompt))
        texts = [prompt] if isinstance(prompt, str) else prompt if isinstance(prompt, list) else []
        counts = []
        for text in texts:
            if isinstance(text, list) and all(isinstance(t, int) for t in text):
                counts.append(Measured(len(text)))
            elif isinstance(text, str):
                counts.append(await _count(post_json, "/tokenize", {"model": payload.get("model"), "prompt": text},
                                           "count", route))
            if counts and counts[-1] is None:
                return None
        return max(counts, key=lambda m: m.prompt_tokens) if counts else None

    return measure


def messages_measure(post_json, payload: dict, *, route=None) -> Measure:
    """An Anthropic Messages prompt (system, tools, messages), counted by the engine's ``count_tokens``."""
    request = {name: value for name, value in payload.items() if name not in ("max_tokens", "stream")}
    return lambda: _count(post_json, "/v1/messages/count_tokens", request, "input_tokens", route)


def responses_measure(post_json, payload: dict, *, route=None) -> Measure:
    """A Responses prompt, counted from above: instructions and input as chat messages (an item that is
    not a plain message as its JSON text), tools as chat tools, through ``/tokenize``."""

    async def measure() -> Measured | None:
        messages = []
        if isinstance(payload.get("instructions"), str):
            messages.append({"role": "system", "content": payload["instructions"]})
        items = payload.get("input")
        for item in [{"role": "user", "content": items}] if isinstance(items, str) else items or []:
            messages.append(_as_chat_message(item))
        request = {"model": payload.get("model"), "messages": messages, "add_generation_prompt": True}
        tools = [_as_chat_tool(tool) for tool in payload.get("tools") or [] if isinstance(tool, dict)]
        if tools:
            request["tools"] = tools
        measured = await _count(post_json, "/tokenize", request, "count", route)
        return Measured(measured.prompt_tokens, measured.context, exact=False) if measured else None

    return measure


def _as_chat_message(item: object) -> dict:
    if isinstance(item, dict) and isinstance(item.get("role"), str):
        content = item.get("content")
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        if isinstance(content, str):
            role = item["role"] if item["role"] in ("user", "assistant", "system") else "system"
            return {"role": role, "content": content}
    return {"role": "user", "content": orjson.dumps(item).decode()}


def _as_chat_tool(tool: dict) -> dict:
    if tool.get("type") == "function" and "name" in tool:
        return {"type": "function", "function": {key: tool[key] for key in ("name", "description", "parameters")
                                                 if key in tool}}
    return {"type": "function", "function": {"name": str(tool.get("name") or tool.get("type") or "tool"),
                                             "description": orjson.dumps(tool).decode()}}


# --- the rule per protocol, and the two calls their prepare steps make ---------------------------

@dataclass(frozen=True, slots=True)
class BudgetRule:
    fields: tuple[str, ...]   # the output-limit fields (the first is the one errors name)
    prompt_field: str         # where the prompt is
    measure: Callable[..., Measure]


CHAT = BudgetRule(("max_completion_tokens", "max_tokens"), "messages", chat_measure)
COMPLETIONS = BudgetRule(("max_tokens",), "prompt", completion_measure)
RESPONSES = BudgetRule(("max_output_tokens",), "input", responses_measure)


async def fit_payload(rule: BudgetRule, payload: dict, *, body_bytes: int, request: RequestContext,
                      core: Core) -> bool:
    """Fit ``payload``'s output limit (a request of ``body_bytes``); True when it was lowered."""
    engine_state = core.engine_state
    context = engine_state.max_model_len
    if context is None:
        return False
    room = context - prompt_bound(body_bytes)
    for name in rule.fields:  # most requests: no limit asked, or one that obviously fits (no coroutine, no closure)
        value = payload.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > room:
            break
    else:
        return False

    def measure() -> Awaitable[Measured | None]:
        model = engine_state.resolve_model(payload.get("model")) or payload.get("model") or engine_state.default_model
        return rule.measure(functools.partial(core.engines.post_json, request=request), {**payload, "model": model},
                            route=RouteHints(model=model))()

    lowered = await fit_output_limit(payload, body_bytes=body_bytes, fields=rule.fields,
                                     prompt_field=rule.prompt_field, context=context,
                                     measure=measure)
    if lowered is not None:
        request.add_response_header(*lowered.header)
    return lowered is not None


async def fit_body(rule: BudgetRule, asked: dict, body: bytes, *, request: RequestContext, core: Core) -> bytes:
    """``body`` (the engine request, already built) with its output limit fitted; ``asked``: the
    client's request, read for the limit, so a limit that obviously fits costs no parse of ``body``."""
    context = core.engine_state.max_model_len
    limits = asked_limits(asked, rule.fields)
    if not limits or context is None or max(v for _, v in limits) + prompt_bound(len(body)) <= context:
        return body
    payload = orjson.loads(body)
    if await fit_payload(rule, payload, body_bytes=len(body), request=request, core=core):
        return orjson.dumps(payload)
    return body
