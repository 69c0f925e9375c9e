"""An engine that answers with a recording: a stream captured in vLLM's wire format, replayed as is.

For what the embedded model never produces (reasoning, ``thinking`` blocks, tool calls), the
gateway's relay is tested on recorded streams (tests/gateway/protocols/recordings/). It also
counts prompts the way vLLM's ``/tokenize`` and ``/v1/messages/count_tokens`` answer (a fixed
count the test sets; past the context, ``count_tokens`` refuses as vLLM 0.32 does, having counted
one token beyond it) and records every request, so budget tests can see what was measured.
"""

from __future__ import annotations

import contextlib
import socket
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from aiohttp import web

RECORDINGS = Path(__file__).resolve().parents[1] / "gateway" / "protocols" / "recordings"


def recording(name: str) -> bytes:
    return (RECORDINGS / name).read_bytes()


@dataclass
class RecordedEngine:
    streams: dict[str, bytes] = field(default_factory=dict)  # engine path -> the SSE body it answers
    answers: dict[str, bytes] = field(default_factory=dict)  # engine path -> its JSON answer (no "stream")
    model: str = "fake-model"
    max_model_len: int = 4096
    prompt_tokens: int = 100                                  # what the count routes answer
    requests: list[tuple[str, dict]] = field(default_factory=list)
    base_url: str = ""
    _runner: web.AppRunner | None = None

    def bodies(self, path: str) -> list[dict]:
        return [body for seen, body in self.requests if seen == path]

    async def start(self) -> "RecordedEngine":
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/tokenize", self._tokenize)
        app.router.add_post("/v1/messages/count_tokens", self._count_tokens)
        app.router.add_post("/{path:.*}", self._answer)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        await web.SockSite(self._runner, sock).start()
        self.base_url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="")

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": self.model, "object": "model", "root": "/models/recorded", "max_model_len": self.max_model_len}]})

    async def _tokenize(self, request: web.Request) -> web.Response:
        self.requests.append((request.path, orjson.loads(await request.read())))
        return web.json_response({"count": self.prompt_tokens, "max_model_len": self.max_model_len, "tokens": []})

    async def _count_tokens(self, request: web.Request) -> web.Response:
        self.requests.append((request.path, orjson.loads(await request.read())))
        if self.prompt_tokens > self.max_model_len:  # vLLM's renderer stops one token past the context
            message = (f"This model's maximum context length is {self.max_model_len} tokens. However, your prompt "
                       f"contains at least {self.max_model_len + 1} input tokens, which exceeds this limit even "
                       f"without any output tokens. Please reduce the length of the input prompt. "
                       f"(parameter=input_tokens, value={self.max_model_len + 1})")
            return web.json_response({"type": "error", "error": {"type": "BadRequestError", "message": message}},
                                     status=400)
        return web.json_response({"input_tokens": self.prompt_tokens})

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        payload = orjson.loads(await request.read())
        self.requests.append((request.path, payload))
        if not payload.get("stream") and request.path in self.answers:
            return web.Response(body=self.answers[request.path], content_type="application/json")
        body = self.streams.get(request.path)
        if body is None:
            return web.json_response({"error": {"message": "no recording", "type": "NotFoundError"}}, status=404)
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        for event in body.split(b"\n\n")[:-1]:  # one write per event, as vLLM sends them
            await response.write(event + b"\n\n")
        await response.write_eof()
        return response


@contextlib.asynccontextmanager
async def recorded_engine(**kwargs):
    engine = await RecordedEngine(**kwargs).start()
    try:
        yield engine
    finally:
        await engine.stop()
