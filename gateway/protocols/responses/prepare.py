"""A Responses request read once: what the gateway decides itself, and the request the engine gets.

The gateway owns what vLLM keeps only in per-process dictionaries, so the engine is always
asked for a plain, unstored generation:

- ``request_id`` is forced to the gateway's new response id (vLLM makes it the response's
  id: a client choosing it could overwrite or guess another key's response);
- ``store`` is false and ``background`` false for the engine (the gateway stores, and runs
  background responses itself); a background run is always streamed from the engine, so
  its events can be replayed and resumed;
- ``previous_response_id`` becomes the conversation itself: the input items the gateway
  stored for the previous response, its output, then this request's input (so follow-ups
  work on any replica and after a restart, whatever engine serves them). Instructions are
  not carried over (OpenAI's rule).

Every other field reaches vLLM as the client wrote it.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field

import orjson

from gateway.engines.routing import RouteHints
from gateway.engines.state import EngineState
from gateway.http.errors import GatewayError
from gateway.protocols.common.body import expect_bool, expect_str, json_object
from gateway.protocols.responses.records.base import StoredResponse

RESPONSES_PATH = "/v1/responses"


def new_response_id() -> str:
    return "resp_" + secrets.token_hex(16)


@dataclass(slots=True)
class ResponsesRequest:
    response_id: str
    payload: dict = field(repr=False)        # as the client sent it (model resolved)
    engine_body: bytes = field(repr=False)   # what the engine gets
    model: str
    stream: bool
    background: bool
    store: bool
    previous_response_id: str | None
    history: list = field(repr=False)        # the conversation before this request's input...
    input_items: list = field(repr=False)    # ...and this request's input, as items
    root: str                                # the conversation's affinity key
    created_at: float

    @property
    def route(self) -> RouteHints:
        return RouteHints(model=self.model, affinity_key=self.root)

    @property
    def patch(self) -> dict:
        """What the gateway sets in every response object (the engine saw other values)."""
        patch: dict = {"background": True} if self.background else {}
        if self.previous_response_id is not None:
            patch["previous_response_id"] = self.previous_response_id
        return patch

    def queued_object(self) -> dict:
        """The response before the engine said anything (the record starts with it)."""
        return {"id": self.response_id, "object": "response", "created_at": int(self.created_at),
                "status": "queued", "model": self.model, "output": [], "usage": None, "error": None,
                "incomplete_details": None, "instructions": self.payload.get("instructions"),
                "metadata": self.payload.get("metadata"), "background": self.background,
                "previous_response_id": self.previous_response_id}

    def record(self, owner: str, retention_seconds: float, *, status: str, body: bytes,
               streamed: bool = False) -> StoredResponse:
        return StoredResponse(owner=owner, response_id=self.response_id, status=status, background=self.background,
                              body=body, history=orjson.dumps(self.input_items), root=self.root,
                              created_at=self.created_at, expires_at=self.created_at + retention_seconds,
                              streamed=streamed, previous_id=self.previous_response_id)


def read_request(raw: bytes) -> dict:
    """The body, with the fields the gateway reads checked (a 400 naming the field otherwise)."""
    payload = json_object(raw)
    if "input" not in payload or payload["input"] is None:
        raise GatewayError(400, "'input' is required", param="input")
    if not isinstance(payload["input"], (str, list)):
        raise GatewayError(400, "'input' must be a string or an array of input items", param="input")
    for name in ("stream", "background", "store"):
        expect_bool(payload, name)
    for name in ("model", "previous_response_id", "user", "instructions"):
        expect_str(payload, name)
    conversation = payload.get("conversation")
    if conversation is not None and not isinstance(conversation, (str, dict)):
        raise GatewayError(400, "'conversation' must be a string or an object with an 'id'", param="conversation")
    return payload


def prepare(payload: dict, *, engine: EngineState, previous: StoredResponse | None,
            conversation: list | None = None) -> ResponsesRequest:
    """The engine request for ``payload``; ``previous``: the record ``previous_response_id`` names,
    ``conversation``: its conversation's items, its output included (``chain.conversation``)."""
    response_id = new_response_id()
    background = expect_bool(payload, "background")
    store = expect_bool(payload, "store", default=True)
    stream = expect_bool(payload, "stream")
    if background and not store:
        raise GatewayError(400, "'background' needs 'store' to be true (a background response is retrieved later)",
                           param="background")
    upstream = engine.resolve_model(payload.get("model"))
    model = upstream or payload.get("model") or engine.default_model
    body = dict(payload)
    if upstream is not None:
        body["model"] = upstream
    input_items = as_items(payload["input"])
    history: list = []
    previous_id = payload.get("previous_response_id")
    if previous is not None:
        history = list(conversation or ())
        body["input"] = history + input_items
        del body["previous_response_id"]
        root = previous.root
    else:
        root = _conversation_key(payload) or payload.get("user") or response_id
    body.update(request_id=response_id, store=False, background=False)
    if background:
        body["stream"] = True
    return ResponsesRequest(response_id=response_id, payload=payload, engine_body=orjson.dumps(body), model=model,
                            stream=stream, background=background, store=store, previous_response_id=previous_id,
                            history=history, input_items=input_items, root=root, created_at=time.time())


def as_items(value: str | list) -> list:
    """A request's ``input`` as input items (a plain string is one user message)."""
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return list(value)


def output_items(body: bytes) -> list:
    """The items a response produced, as the next request's input takes them (reasoning left out)."""
    try:
        output = orjson.loads(body).get("output") or []
    except (orjson.JSONDecodeError, AttributeError):
        return []
    return [item for item in output if isinstance(item, dict) and item.get("type") != "reasoning"]


def _conversation_key(payload: dict) -> str | None:
    conversation = payload.get("conversation")
    if isinstance(conversation, dict):
        conversation = conversation.get("id")
    return conversation if isinstance(conversation, str) else None
