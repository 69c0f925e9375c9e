"""Real clients against a real gateway and the real engine, with what each client sends recorded.

``client_gateway`` (module scope): the gateway under uvicorn in front of the embedded-model engine
(``vllm_engine``), SQLite sessions and stored responses, one API key, wrapped in a recorder
that notes every request's method, path, the fields that matter to compatibility (model,
output limit, stream, tool count, body size) and the answer's status and lowered-limit
header. ``STACK_CLIENT_LOG=FILE`` appends those notes as JSON lines (docs/clients/ quotes them).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pytest

from gateway.app import create_app
from gateway.config import Settings
from gateway.protocols.common.budget import HEADER
from tests.support.servers import run_uvicorn

KEY = "sk-clients-0123456789abcdef"
REPO_ROOT = Path(__file__).resolve().parents[2]
AGENT_BIN = Path(os.environ.get("AGENT_CLIS_PREFIX", REPO_ROOT / ".cache" / "agent-clis")) / "node_modules" / ".bin"
NOTED_FIELDS = ("model", "max_tokens", "max_completion_tokens", "max_output_tokens", "stream", "temperature")


@dataclass
class Recorder:
    """An ASGI wrapper that notes each request and its answer's status (a logging proxy, in process)."""

    app: object
    seen: list[dict] = field(default_factory=list)

    def __getattr__(self, name):  # begin_drain and the rest: the app's own
        return getattr(self.app, name)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        note = {"method": scope["method"], "path": scope["path"],
                "query": scope["query_string"].decode("latin-1"),
                "user_agent": dict(scope["headers"]).get(b"user-agent", b"").decode("latin-1")}
        self.seen.append(note)
        chunks: list[bytes] = []

        async def noting_receive():
            message = await receive()
            if message["type"] == "http.request":
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    note.update(summarise(b"".join(chunks)))
            return message

        async def noting_send(message):
            if message["type"] == "http.response.start":
                note["status"] = message["status"]
                headers = dict(message.get("headers", ()))
                if HEADER.encode() in headers:
                    note["lowered"] = headers[HEADER.encode()].decode()
            await send(message)

        await self.app(scope, noting_receive, noting_send)


def summarise(body: bytes) -> dict:
    try:
        payload = orjson.loads(body) if body else {}
    except orjson.JSONDecodeError:
        return {"bytes": len(body)}
    if not isinstance(payload, dict):
        return {"bytes": len(body)}
    summary = {name: payload[name] for name in NOTED_FIELDS if name in payload}
    summary["bytes"] = len(body)
    if isinstance(payload.get("tools"), list):
        summary["tools"] = len(payload["tools"])
    return summary


@pytest.fixture(scope="module")
def client_gateway(vllm_engine, tmp_path_factory, request):
    folder = tmp_path_factory.mktemp("clients")
    settings = Settings(vllm_base_url=vllm_engine.base_url, vllm_api_key=vllm_engine.api_key, api_keys=[KEY],
                        database_url=f"sqlite+aiosqlite:///{folder}/gateway.db", session_store="sqlite",
                        access_log=False, engine_poll_interval=60, features=["none"])
    recorder = Recorder(create_app(settings))
    with run_uvicorn(recorder) as url:
        yield url, recorder
    log = os.environ.get("STACK_CLIENT_LOG")
    if log:
        with open(log, "a") as out:
            for note in recorder.seen:
                out.write(json.dumps({"module": request.module.__name__, **note}) + "\n")
