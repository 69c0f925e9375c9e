"""Fake engines for the fleet's fast tests: several ``FakeEngine``s (tests/support) that can also die.

On top of the shared fake (vLLM's wire format, what it received), each one here serves
``/metrics`` with the load a test sets, answers 503 when asked, and can die in the middle
of a stream (``die_after`` tokens: its connection is cut, as when the process is killed),
stall (``stall_after``: it goes silent), stop listening and come back on the same port.
Every engine streams the same greedy text (``t0 t1 ...``) unless ``text_prefix`` differs, so
a stream continued on another engine can be compared with an uninterrupted one. A chat whose
final assistant message is continued (``continue_final_message``) goes on counting from that
message's words (``t0 t1 t2 `` -> ``t3 t4 ...``), and ``/tokenize`` counts a chat's tokens by a
fixed rule (:func:`token_count`) that the usage of its streams follows too.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from dataclasses import dataclass

import orjson
from aiohttp import web

from gateway.config import Settings
from tests.support.fake_engine import FakeEngine, Received


@dataclass
class FleetFakeEngine(FakeEngine):
    running: float = 0.0
    waiting: float = 0.0
    die_after: int | None = None    # tokens streamed before the connection is cut
    stall_after: int | None = None  # tokens streamed before the engine falls silent
    text_prefix: str = "t"
    port: int = 0
    requests: int = 0  # completions received (streamed or not)
    tokenized: list[dict] | None = None  # /tokenize requests received

    async def start(self) -> "FleetFakeEngine":
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_post("/tokenize", self._tokenize)
        app.router.add_post("/v1/chat/completions", self._fleet_complete)
        app.router.add_post("/v1/completions", self._fleet_complete)
        app.router.add_post("/v1/messages", self._fleet_other_protocol)
        app.router.add_post("/v1/responses", self._fleet_other_protocol)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()
        self.base_url = f"http://127.0.0.1:{self.port}"
        return self

    async def stop(self) -> None:
        """Stop listening (connections are refused until ``start`` again, on the same port)."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _metrics(self, request: web.Request) -> web.Response:
        labels = f'{{engine="0",model_name="{self.models[0]}"}}'
        text = "\n".join([
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{labels} {self.running}",
            f"vllm:num_requests_waiting{labels} {self.waiting}",
            f"vllm:kv_cache_usage_perc{labels} 0.0",
            f"vllm:prefix_cache_queries_total{labels} 0.0",
            f"vllm:prefix_cache_hits_total{labels} 0.0",
            "",
        ])
        return web.Response(text=text, content_type="text/plain")

    async def _tokenize(self, request: web.Request) -> web.Response:
        payload = await request.json()
        self.tokenized = [*(self.tokenized or []), payload]
        if self.mode == "tokenize_500":
            return web.json_response({"error": {"message": "no tokenizer", "type": "InternalServerError",
                                                "param": None, "code": 500}}, status=500)
        count = token_count(payload)
        return web.json_response({"count": count, "max_model_len": self.max_model_len, "tokens": [0] * count})

    async def _fleet_complete(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        if self.mode == "ok" and (await request.json()).get("continue_final_message"):
            body = await request.read()
            self.received.append(Received(request.path, {k.lower(): v for k, v in request.headers.items()}, body))
            return await self._stream_dying(request, orjson.loads(body))
        if self.mode == "http_503":
            body = await request.read()
            self.received.append(Received(request.path, dict(request.headers), body))
            return web.json_response({"error": {"message": "the engine is sleeping", "type": "ServiceUnavailable",
                                                "param": None, "code": 503}}, status=503)
        if self.die_after is None and self.stall_after is None and self.text_prefix == "t":
            return await self._complete(request)
        body = await request.read()
        self.received.append(Received(request.path, {k.lower(): v for k, v in request.headers.items()}, body))
        payload = orjson.loads(body)
        if not payload.get("stream"):
            if self.die_after is not None:
                request.transport.close()  # dies while "generating" the answer
                return web.Response()
            return await self._complete_with(payload, request)
        return await self._stream_dying(request, payload)

    async def _fleet_other_protocol(self, request: web.Request) -> web.StreamResponse:
        """A Messages or Responses stream (vLLM's events), dying or stalling like the chat streams."""
        self.requests += 1
        body = await request.read()
        self.received.append(Received(request.path, {k.lower(): v for k, v in request.headers.items()}, body))
        self.streams_started += 1
        return await self.protocol_stream(request, orjson.loads(body), text_prefix=self.text_prefix,
                                          die_after=self.die_after, stall_after=self.stall_after)

    async def _complete_with(self, payload: dict, request: web.Request) -> web.Response:
        n = int(payload.get("max_tokens") or 16)
        text = "".join(f"{self.text_prefix}{i} " for i in range(n))
        return web.json_response({
            "id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": payload.get("model"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 5, "total_tokens": 5 + n, "completion_tokens": n}})

    async def _stream_dying(self, request: web.Request, payload: dict) -> web.StreamResponse:
        self.streams_started += 1
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        n = int(payload.get("max_tokens") or 16)
        start = 0  # a continued final assistant message: go on from its words
        if payload.get("continue_final_message"):
            start = len(str(payload["messages"][-1].get("content") or "").split())
        prompt_tokens = token_count(payload)
        created = int(time.time())
        request_id = request.headers.get("x-request-id", "fake")

        def frame(choices: list, **extra) -> bytes:
            return b"data: " + orjson.dumps({"id": f"chatcmpl-{request_id}", "object": "chat.completion.chunk",
                                             "created": created, "model": payload.get("model"), "choices": choices,
                                             **extra}) + b"\n\n"

        try:
            await response.write(frame([{"index": 0, "delta": {"role": "assistant", "content": ""},
                                         "logprobs": None, "finish_reason": None}]))
            for i in range(n):
                if self.chunk_delay:
                    await asyncio.sleep(self.chunk_delay)
                if self.die_after is not None and i == self.die_after:
                    request.transport.close()
                    return response
                if self.stall_after is not None and i == self.stall_after:
                    await asyncio.sleep(3600)
                last = i == n - 1
                await response.write(frame([{"index": 0, "delta": {"content": f"{self.text_prefix}{start + i} "},
                                             "logprobs": None, "finish_reason": "length" if last else None}]))
            if (payload.get("stream_options") or {}).get("include_usage"):
                await response.write(frame([], usage={"prompt_tokens": prompt_tokens,
                                                      "total_tokens": prompt_tokens + n, "completion_tokens": n}))
            await response.write(b"data: [DONE]\n\n")
        except (ConnectionResetError, asyncio.CancelledError):
            self.streams_aborted += 1
            self.stream_aborted.set()
            raise
        return response


def token_count(payload: dict) -> int:
    """The fake's tokenizer: a word per token, two tokens of markers around each message (one for a
    final message that is continued), one for the generation prompt."""
    messages = payload.get("messages") or []
    count = sum(len(str(message.get("content") or "").split()) + 2 for message in messages)
    if payload.get("continue_final_message") and messages:
        count -= 1
    elif payload.get("add_generation_prompt", True):
        count += 1
    return count


@contextlib.asynccontextmanager
async def fake_fleet(count: int = 2, **kwargs):
    engines = [await FleetFakeEngine(**kwargs).start() for _ in range(count)]
    try:
        yield engines
    finally:
        for engine in engines:
            await engine.stop()


def fleet_settings(engines: list[FleetFakeEngine], **values) -> Settings:
    """Gateway settings in front of ``engines``: no access log, no background polling."""
    return Settings(**{"vllm_base_urls": ",".join(engine.base_url for engine in engines), "access_log": False,
                       "engine_poll_interval": 60, "engine_metrics_interval": 0, "session_store": "off",
                       **values})
