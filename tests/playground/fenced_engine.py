"""A stand-in engine whose completions are a fixed, fenced answer: the code tab's one fake.

The embedded model's gibberish never holds a markdown fence, so the code tab's extraction
(code block beside the raw text) is shown on this engine's known answer; the real engine's
answer is checked by the other code-tab test. It serves what the gateway's code API asks of
vLLM: /health, /v1/models, /tokenize and /v1/completions, and records the completion bodies.
"""

from __future__ import annotations

import socket

from aiohttp import web

FENCED_ANSWER = (
    "Here is the function you asked for:\n"
    "\n"
    "```python\n"
    "def add(a, b):\n"
    '    """Return the sum of a and b."""\n'
    "    return a + b\n"
    "```\n"
    "\n"
    "It works for ints and floats.\n"
)
FENCED_CODE = 'def add(a, b):\n    """Return the sum of a and b."""\n    return a + b'
MODEL = "fenced-coder"
COMPLETION_TOKENS = 37


class FencedEngine:
    def __init__(self) -> None:
        self.completions: list[dict] = []
        self.base_url = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> "FencedEngine":
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/tokenize", self._tokenize)
        app.router.add_post("/v1/completions", self._complete)
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
            {"id": MODEL, "object": "model", "created": 0, "owned_by": "vllm", "root": MODEL, "max_model_len": 4096}]})

    async def _tokenize(self, request: web.Request) -> web.Response:
        return web.json_response({"count": 12, "max_model_len": 4096, "tokens": list(range(12))})

    async def _complete(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.completions.append(body)
        n = int(body.get("n") or 1)
        return web.json_response({
            "id": "cmpl-fenced", "object": "text_completion", "created": 0, "model": body.get("model"),
            "choices": [{"index": i, "text": FENCED_ANSWER, "finish_reason": "stop", "logprobs": None}
                        for i in range(n)],
            "usage": {"prompt_tokens": 12, "completion_tokens": COMPLETION_TOKENS * n,
                      "total_tokens": 12 + COMPLETION_TOKENS * n},
        })
