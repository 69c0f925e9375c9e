"""The events vLLM streams for a Messages and a Responses request, for the fake engines.

vLLM builds both from its chat stream (``vllm/entrypoints/anthropic/serving.py``,
``vllm/entrypoints/openai/responses/streaming_events.py``); the shapes here are those, as
captured from the real engine: the same event names, fields and order, one text delta per
token, ``sequence_number`` from 0 (Responses), the message id ``chatcmpl-<request id>``
(Messages) and a fresh random output item id per run (Responses, as vLLM's ``msg_<uuid>``).
A stream is its opening events, one event per token, then its closing events, so a fake can
die or stall between any two tokens.
"""

from __future__ import annotations

import secrets
import time

import orjson

MESSAGES = "/v1/messages"
RESPONSES = "/v1/responses"


def _event(name: str, payload: dict) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


class MessagesStream:
    """An Anthropic Messages stream of ``tokens`` pieces of text."""

    def __init__(self, payload: dict, request_id: str, *, prompt_tokens: int = 5) -> None:
        self.payload = payload
        self.id = f"chatcmpl-{request_id}"
        self.prompt_tokens = prompt_tokens
        self.budget = int(payload.get("max_tokens") or 16)

    def opening(self) -> list[bytes]:
        return [_event("message_start", {"type": "message_start", "message": {
                    "id": self.id, "type": "message", "role": "assistant", "content": [],
                    "model": self.payload.get("model"), "stop_reason": None, "stop_sequence": None,
                    "usage": {"input_tokens": self.prompt_tokens, "output_tokens": 0}}}),
                _event("content_block_start", {"type": "content_block_start",
                                               "content_block": {"type": "text", "text": ""}, "index": 0})]

    def token(self, text: str) -> bytes:
        return _event("content_block_delta", {"type": "content_block_delta",
                                              "delta": {"type": "text_delta", "text": text}, "index": 0})

    def closing(self, generated: int) -> list[bytes]:
        return [_event("content_block_stop", {"type": "content_block_stop", "index": 0}),
                _event("message_delta", {"type": "message_delta",
                                         "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
                                         "usage": {"input_tokens": self.prompt_tokens, "output_tokens": generated}}),
                _event("message_stop", {"type": "message_stop"})]


class ResponsesStream:
    """A Responses stream of ``tokens`` pieces of text, numbered by ``sequence_number``."""

    def __init__(self, payload: dict, *, prompt_tokens: int = 5) -> None:
        self.payload = payload
        self.budget = int(payload.get("max_output_tokens") or 16)
        self.item_id = "msg_" + secrets.token_hex(8)  # vLLM: a new random id per run
        self.prompt_tokens = prompt_tokens
        self.sequence = 0
        self.text = ""
        self.response = {"id": payload.get("request_id") or "resp_fake", "created_at": int(time.time()),
                         "model": payload.get("model"), "object": "response", "output": [], "status": "in_progress",
                         "background": False, "previous_response_id": None, "usage": None,
                         "max_output_tokens": self.budget, "temperature": payload.get("temperature")}

    def _next(self, name: str, fields: dict) -> bytes:
        event = _event(name, {**fields, "sequence_number": self.sequence, "type": name})
        self.sequence += 1
        return event

    def opening(self) -> list[bytes]:
        item = {"id": self.item_id, "content": [], "role": "assistant", "status": "in_progress", "type": "message"}
        return [self._next("response.created", {"response": self.response}),
                self._next("response.in_progress", {"response": self.response}),
                self._next("response.output_item.added", {"item": item, "output_index": 0}),
                self._next("response.content_part.added", {
                    "content_index": 0, "item_id": self.item_id, "output_index": 0,
                    "part": {"annotations": [], "text": "", "type": "output_text", "logprobs": []}})]

    def token(self, text: str) -> bytes:
        self.text += text
        return self._next("response.output_text.delta", {"content_index": 0, "delta": text, "item_id": self.item_id,
                                                          "logprobs": [], "output_index": 0})

    def closing(self, generated: int) -> list[bytes]:
        part = {"annotations": [], "text": self.text, "type": "output_text", "logprobs": None}
        item = {"id": self.item_id, "content": [part], "role": "assistant", "status": "completed", "type": "message"}
        final = {**self.response, "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"},
                 "output": [item], "usage": {"input_tokens": self.prompt_tokens, "output_tokens": generated,
                                             "total_tokens": self.prompt_tokens + generated}}
        return [self._next("response.output_text.done", {"content_index": 0, "item_id": self.item_id, "logprobs": [],
                                                         "output_index": 0, "text": self.text}),
                self._next("response.content_part.done", {"content_index": 0, "item_id": self.item_id,
                                                          "output_index": 0, "part": part}),
                self._next("response.output_item.done", {"item": item, "output_index": 0}),
                self._next("response.completed", {"response": final})]


def stream_for(path: str, payload: dict, request_id: str) -> MessagesStream | ResponsesStream:
    if path == MESSAGES:
        return MessagesStream(payload, request_id)
    return ResponsesStream(payload)
