"""Fakes of the engine client and the engine state, for the Stack 2.9 code API's service and route tests.

``FakeUpstream`` stands for the engine client (``core.engines``: ``post_json``), scripted per
path; ``FakeEngineState`` for ``core.engine_state``. The builders below shape answers as vLLM
writes them (completions, chat completions, ``/tokenize``, error envelopes).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import orjson

from gateway.engines.errors import parse_error_body

MODEL_NOT_LOADED = "Model not loaded. Check /health for status."


class FakeUpstream:
    """Answers ``post_json`` per path: a dict, a callable(payload) -> dict, or an exception to raise."""

    def __init__(self, **answers: Any) -> None:
        self.answers = {path.replace("_", "/"): answer for path, answer in answers.items()}
        self.calls: list[tuple[str, dict, str | None]] = []

    router = SimpleNamespace(uses_prefix=False)  # (read to route a request the flow control queues)

    async def post_json(self, path: str, payload: dict, *, request=None, request_id: str | None = None,
                        route=None) -> dict:
        """``request``: the request context the gateway passes (its id is what the engine gets)."""
        self.calls.append((path, payload, request.request_id if request is not None else request_id))
        answer = self.answers[path]
        if isinstance(answer, BaseException):
            raise answer
        return answer(payload) if callable(answer) else answer

    def payload(self, path: str) -> dict:
        [payload] = [p for called, p, _ in self.calls if called == path]
        return payload

    @property
    def paths(self) -> list[str]:
        return [path for path, _, _ in self.calls]


def upstream(**answers: Any) -> FakeUpstream:
    """A FakeUpstream; keyword names are paths with "/" spelled "_" (``_v1_completions``)."""
    return FakeUpstream(**answers)


@dataclass
class FakeEngineState:
    """Stands for ``EngineState``: ready or not, the served model and its context length."""

    ready: bool = True
    default_model: str = "served-model"
    reported_model: str = "served-model"
    max_model_len: int = 8192
    root: str | None = None
    ready_after_refresh: bool | None = None
    refreshes: int = 0

    async def refresh_if_stale(self) -> None:
        self.refreshes += 1
        if self.ready_after_refresh is not None:
            self.ready = self.ready_after_refresh


def tokenized(count: int, limit: int = 8192) -> dict:
    return {"count": count, "max_model_len": limit, "tokens": list(range(count))}


def completion(*texts: str, tokens: int = 7, finish: str = "length", order: list[int] | None = None) -> dict:
    indexes = order or list(range(len(texts)))
    choices = [{"index": i, "text": texts[i], "finish_reason": finish} for i in indexes]
    return {"object": "text_completion", "choices": choices,
            "usage": {"prompt_tokens": 3, "completion_tokens": tokens, "total_tokens": 3 + tokens}}


def chat_completion(content: str | None, *, tokens: int = 5, finish: str = "stop") -> dict:
    return {"object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish}],
            "usage": {"prompt_tokens": 11, "completion_tokens": tokens, "total_tokens": 11 + tokens}}


def engine_error(status: int, message: str, param: str | None = None) -> Exception:
    """The error UpstreamClient raises for an engine answer with this status (vLLM's envelope)."""
    body = {"error": {"message": message, "type": "BadRequestError", "param": param, "code": status}}
    return parse_error_body(status, orjson.dumps(body))
