"""Counting a prompt longer than the context: ``count_tokens`` answers the count, as Anthropic's does.

vLLM's ``/v1/messages/count_tokens`` renders the prompt with the same length check as a
generation and refuses one past the context (``maximum context length is 65536 tokens.
However, your prompt contains at least 65537 input tokens``, not a count). Counting is not
generating: Anthropic's route counts any prompt, and clients count precisely to learn by how
much a conversation is too long (to compact it). vLLM's ``/tokenize`` renders chat messages
with the chat template and does not check their length, but takes OpenAI's messages: on that
refusal the gateway converts the request the way vLLM's Messages route converts it (system
text first, text blocks, ``tool_use`` as tool calls with their JSON input, ``tool_result`` as
tool messages, thinking as ``reasoning``, tools as functions, system messages inside
``messages`` joined to the system text as vLLM does for templates that want one; images are
not counted) and
answers ``/tokenize``'s count in ``count_tokens``' shape. Prompts that fit keep vLLM's own
count (one request, as before); the conversion is checked against it on the real engine. The
output budget counts a Messages prompt the same way (:data:`MESSAGES`), so a generation whose
prompt is past the context is refused with its real length.
Anthropic calls its own count an estimate; this one is exact for text, tools and tool calls.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable

import orjson

from gateway.engines.errors import EngineError, EngineHTTPError
from gateway.protocols.common import budget

# vLLM's refusal of a prompt past the context, counted in tokens or (a very long text) in characters.
PAST_CONTEXT = re.compile(r"maximum context length is \d+ tokens\. However, your prompt contains")
BILLING_HEADER = "x-anthropic-billing-header"  # Claude Code's per-request system block, which vLLM drops

PostJson = Callable[[str, dict], Awaitable[dict]]


def past_context(error: EngineHTTPError) -> bool:
    return error.upstream_status == 400 and PAST_CONTEXT.search(error.message) is not None


def _text(blocks: object) -> str:
    if isinstance(blocks, str):
        return "" if blocks.startswith(BILLING_HEADER) else blocks
    return "".join(block["text"] for block in blocks or () if isinstance(block, dict) and block.get("type") == "text"
                   and isinstance(block.get("text"), str) and block["text"]
                   and not block["text"].startswith(BILLING_HEADER))


def _tool_result_text(content: object) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(str(item.get("text", "")) for item in content or ()
                     if isinstance(item, dict) and item.get("type") == "text")


def chat_messages(payload: dict) -> list[dict]:
    """The Messages request's ``system`` and ``messages`` as the chat messages vLLM renders."""
    messages: list[dict] = []
    system = _text(payload.get("system")) + "".join(
        _text(message.get("content")) for message in payload.get("messages") or ()
        if isinstance(message, dict) and message.get("role") == "system")
    if system:
        messages.append({"role": "system", "content": system})
    for message in payload.get("messages") or ():
        if not isinstance(message, dict) or message.get("role") == "system":
            continue
        role, content = message.get("role"), message.get("content")
        if isinstance(content, str):
            messages.append({"role": role, "content": content})
            continue
        converted: dict = {"role": role}
        parts: list[str] = []
        calls: list[dict] = []
        reasoning: list[str] = []
        for block in content or ():
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "text" and block.get("text"):
                parts.append(block["text"])
            elif kind == "thinking" and isinstance(block.get("thinking"), str):
                reasoning.append(block["thinking"])
            elif kind == "tool_use":
                calls.append({"id": block.get("id") or "call", "type": "function",
                              "function": {"name": block.get("name") or "",
                                           "arguments": orjson.dumps(block.get("input") or {}).decode()}})
            elif kind == "tool_result" and role == "user":
                messages.append({"role": "tool", "tool_call_id": block.get("tool_use_id") or "",
                                 "content": _tool_result_text(block.get("content"))})
            elif kind == "tool_result":
                parts.append(f"Tool result: {block.get('content') or ''}")
        if reasoning:
            converted["reasoning"] = "".join(reasoning)
        if calls:
            converted["tool_calls"] = calls
        if parts:
            converted["content"] = parts[0] if len(parts) == 1 else [{"type": "text", "text": p} for p in parts]
        if role != "user" or "content" in converted:
            messages.append(converted)
    return messages


def chat_tools(payload: dict) -> list[dict]:
    return [{"type": "function", "function": {"name": tool.get("name"), "description": tool.get("description"),
                                              "parameters": tool.get("input_schema")}}
            for tool in payload.get("tools") or () if isinstance(tool, dict) and "name" in tool]


async def tokenize_count(post_json: PostJson, payload: dict) -> int | None:
    """The tokens of the Messages request ``payload`` as vLLM renders it, counted by ``/tokenize`` (no length
    check); None when the engine cannot count it."""
    request = {"model": payload.get("model"), "messages": chat_messages(payload), "add_generation_prompt": True}
    tools = chat_tools(payload)
    if tools:
        request["tools"] = tools
    if isinstance(payload.get("chat_template_kwargs"), dict):
        request["chat_template_kwargs"] = payload["chat_template_kwargs"]
    try:
        answer = await post_json("/tokenize", request)
    except EngineError:
        return None
    count = answer.get("count")
    return count if isinstance(count, int) and not isinstance(count, bool) else None


async def count_past_context(post_json: PostJson, payload: dict) -> bytes | None:
    """``count_tokens``' answer for a prompt vLLM refused to count; None when ``/tokenize`` cannot count it."""
    count = await tokenize_count(post_json, payload)
    if count is None:
        return None
    return orjson.dumps({"input_tokens": count, "context_management": {"original_input_tokens": count}})


def messages_measure(post_json, payload: dict, *, route=None) -> budget.Measure:
    """The output budget's count of a Messages prompt (``budget.messages_measure``: vLLM's ``count_tokens``),
    with a prompt past the context counted exactly too: Anthropic's "prompt is too long: N tokens > M
    maximum" then names its real length, which clients read to know how much to cut, not vLLM's
    "at least" one token past the context."""
    engine_count = budget.messages_measure(post_json, payload, route=route)

    async def measure() -> budget.Measured | None:
        measured = await engine_count()
        if measured is None or not measured.at_least:
            return measured
        count = await tokenize_count(lambda path, body: post_json(path, body, route=route), payload)
        return budget.Measured(count, measured.context) if count is not None else measured

    return measure


# Anthropic's output budget (``budget``): ``max_tokens`` fitted to the context, its prompt counted as above.
MESSAGES = budget.BudgetRule(("max_tokens",), "messages", messages_measure)
