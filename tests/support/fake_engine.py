"""A controllable stand-in for vLLM's OpenAI server, for fast unit tests.

It speaks vLLM's wire format (same chunk shapes, ``data: ...\\n\\n`` framing,
usage chunk with ``choices: []``) and records what it received, so tests can
assert what the gateway forwarded. Behaviour is switched per test through
attributes (``mode``, ``chunk_delay``, ...). Never the only evidence that a
feature works: integration tests run the real engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from dataclasses import dataclass, field

import orjson
from aiohttp import web

from tests.support.fake_protocols import stream_for


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> dict:
        return orjson.loads(self.body)


@dataclass
class FakeEngine:
    models: list[str] = field(default_factory=lambda: ["fake-model"])
    max_model_len: int = 2048
    mode: str = "ok"  # ok | http_400 | http_500 | hang | break_mid_stream | break_before_end | no_done | garbage
    health_status: int = 200
    chunk_delay: float = 0.0
    first_chunk_delay: float = 0.0
    response_delay: float = 0.0  # seconds before a non-streamed answer: the engine "generating"
    models_delay: float = 0.0    # seconds before /v1/models answers (3600: a frozen engine)
    cached_tokens: int = 0       # >0: non-streamed answers report prompt_tokens_details.cached_tokens (vLLM's
                                 # --enable-prompt-tokens-details)
    end_delay: float = 0.0       # seconds between a stream's [DONE] and the end of its body (its last chunk)
    received: list[Received] = field(default_factory=list)
    streams_started: int = 0
    client_ports: set[int] = field(default_factory=set)  # one per TCP connection the gateway opened
    streams_aborted: int = 0
    streams_active: int = 0       # streams being generated right now
    most_streams_active: int = 0  # the most at once so far
    hold: asyncio.Event | None = None  # set: streams wait for it after their headers, before any chunk
    answer_hold: asyncio.Event | None = None  # set: non-streamed answers (and /v1/messages) wait for it, once received
    hold_after: int = 0  # with ``hold``: the tokens a chat stream sends (after its role chunk) before it waits
    # set: a Messages or Responses stream waits for it before its terminal event, every other event sent
    end_hold: asyncio.Event | None = None
    stream_aborted: asyncio.Event = field(default_factory=asyncio.Event)
    request_aborted: asyncio.Event = field(default_factory=asyncio.Event)
    base_url: str = ""
    api_key: str | None = None  # the fake checks none; GatewayProcess passes it on like a real engine's
    _runner: web.AppRunner | None = None

    async def start(self) -> "FakeEngine":
        app = web.Application(client_max_size=64 * 1024 * 1024)  # above any gateway body limit
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._complete)
        app.router.add_post("/v1/completions", self._complete)
        app.router.add_post("/v1/messages", self._other_protocol)
        app.router.add_post("/v1/responses", self._other_protocol)
        app.router.add_post("/v1/audio/transcriptions", self._audio)
        app.router.add_post("/v1/audio/translations", self._audio)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        site = web.SockSite(self._runner, sock)
        await site.start()
        self.base_url = f"http://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def last(self) -> Received:
        return self.received[-1]

    async def _health(self, request: web.Request) -> web.Response:
        self.client_ports.add(request.transport.get_extra_info("peername")[1])
        return web.Response(status=self.health_status, text="")

    async def _models(self, request: web.Request) -> web.Response:
        self.client_ports.add(request.transport.get_extra_info("peername")[1])
        if self.models_delay:
            await asyncio.sleep(self.models_delay)
        data = [
            {"id": name, "object": "model", "created": 0, "owned_by": "vllm", "root": "/models/fake",
             "parent": None, "max_model_len": self.max_model_len}
            for name in self.models
        ]
        return web.json_response({"object": "list", "data": data})

    async def _audio(self, request: web.Request) -> web.Response:
        """A transcription of nothing: records the multipart body as the gateway relayed it."""
        body = await request.read()
        self.received.append(Received(request.path, {k.lower(): v for k, v in request.headers.items()}, body))
        return web.json_response({"text": "", "usage": {"type": "duration", "seconds": 1}})

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        self.client_ports.add(request.transport.get_extra_info("peername")[1])
        body = await request.read()
        self.received.append(Received(request.path, {k.lower(): v for k, v in request.headers.items()}, body))
        payload = orjson.loads(body)
        if self.mode == "http_400":
            return web.json_response(
                {"error": {"message": "temperature must be non-negative", "type": "BadRequestError",
                           "param": "temperature", "code": 400}}, status=400)
        if self.mode == "http_500":
            return web.json_response({"error": {"message": "engine exploded", "type": "InternalServerError",
                                                "param": None, "code": 500}}, status=500)
        if self.mode == "garbage":
            return web.Response(text="<html>not json</html>", content_type="text/html")
        if self.mode == "hang":
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self.request_aborted.set()
                raise
        if payload.get("stream"):
            return await self._stream(request, payload)
        if self.answer_hold is not None:
            await self.answer_hold.wait()
        if self.response_delay:
            await asyncio.sleep(self.response_delay)
        n_tokens = int(payload.get("max_tokens") or 16)
        chat = request.path.endswith("/chat/completions")
        choice = (
            {"index": 0, "message": {"role": "assistant", "content": "tok " * n_tokens}, "finish_reason": "length"}
            if chat
            else {"index": 0, "text": "tok " * n_tokens, "finish_reason": "length"}
        )
        usage = {"prompt_tokens": 5, "total_tokens": 5 + n_tokens, "completion_tokens": n_tokens}
        if self.cached_tokens:
            usage["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens}
        return web.json_response({
            "id": "cmpl-fake", "object": "chat.completion" if chat else "text_completion", "created": 0,
            "model": payload.get("model"), "choices": [choice], "usage": usage,
        })

    async def _stream(self, request: web.Request, payload: dict) -> web.StreamResponse:
        self.streams_started += 1
        self.streams_active += 1
        self.most_streams_active = max(self.most_streams_active, self.streams_active)
        try:
            return await self._generate(request, payload)
        finally:
            self.streams_active -= 1

    async def _generate(self, request: web.Request, payload: dict) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        n_tokens = int(payload.get("max_tokens") or 16)
        created = int(time.time())
        chat = request.path.endswith("/chat/completions")

        def frame(obj: dict) -> bytes:
            return b"data: " + orjson.dumps(obj) + b"\n\n"

        def chunk(content: str, finish: str | None = None) -> bytes:
            if chat:
                choice = {"index": 0, "delta": {"content": content}, "logprobs": None, "finish_reason": finish}
                obj = "chat.completion.chunk"
            else:
                choice = {"index": 0, "text": content, "logprobs": None, "finish_reason": finish}
                obj = "text_completion"
            return frame({"id": "chatcmpl-fake", "object": obj, "created": created,
                          "model": payload.get("model"), "choices": [choice]})

        try:
            if self.hold is not None and not (chat and self.hold_after):
                await self.hold.wait()
            if self.first_chunk_delay:
                await asyncio.sleep(self.first_chunk_delay)
            if chat:
                await response.write(frame({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": created,
                                            "model": payload.get("model"),
                                            "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                         "logprobs": None, "finish_reason": None}]}))
            for i in range(n_tokens):
                if self.hold is not None and chat and self.hold_after and i == self.hold_after:
                    await self.hold.wait()
                if self.chunk_delay:
                    await asyncio.sleep(self.chunk_delay)
                if self.mode == "break_mid_stream" and i == n_tokens // 2:
                    request.transport.close()  # the engine dies mid-stream
                    return response
                last = i == n_tokens - 1
                await response.write(chunk(f"t{i} ", "length" if last else None))
            if (payload.get("stream_options") or {}).get("include_usage"):
                await response.write(frame({"id": "chatcmpl-fake", "object": "chat.completion.chunk",
                                            "created": created, "model": payload.get("model"), "choices": [],
                                            "usage": {"prompt_tokens": 5, "total_tokens": 5 + n_tokens,
                                                      "completion_tokens": n_tokens}}))
            if self.mode != "no_done":
                await response.write(b"data: [DONE]\n\n")
            if self.end_delay:
                await asyncio.sleep(self.end_delay)  # the body's end comes in a packet of its own, later
        except (ConnectionResetError, asyncio.CancelledError):
            self.streams_aborted += 1
            self.stream_aborted.set()
            raise
        return response


    async def _other_protocol(self, request: web.Request) -> web.StreamResponse:
        """``/v1/messages`` and ``/v1/responses``, streamed as vLLM streams them (``fake_protocols``)."""
        body = await request.read()
        self.received.append(Received(request.path, {k.lower(): v for k, v in request.headers.items()}, body))
        payload = orjson.loads(body)
        if self.answer_hold is not None:
            await self.answer_hold.wait()
        if not payload.get("stream"):
            return web.json_response({"error": {"message": "the fake engine streams these routes only",
                                                "type": "BadRequestError", "param": "stream", "code": 400}},
                                     status=400)
        self.streams_started += 1
        return await self.protocol_stream(request, payload)

    async def protocol_stream(self, request: web.Request, payload: dict, *, text_prefix: str = "t",
                              die_after: int | None = None, stall_after: int | None = None) -> web.StreamResponse:
        """Stream ``payload``'s events (``t0 t1 ...`` unless ``text_prefix`` differs); ``die_after``
        tokens the connection is cut, ``stall_after`` tokens the engine falls silent."""
        shape = stream_for(request.path, payload, request.headers.get("x-request-id", "fake"))
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        try:
            if self.hold is not None:
                await self.hold.wait()
            await response.write(b"".join(shape.opening()))
            for i in range(shape.budget):
                if self.chunk_delay:
                    await asyncio.sleep(self.chunk_delay)
                if die_after is not None and i == die_after or self.mode == "break_mid_stream" and i == shape.budget // 2:
                    request.transport.close()  # the engine dies mid-stream
                    return response
                if stall_after is not None and i == stall_after:
                    await asyncio.sleep(3600)
                await response.write(shape.token(f"{text_prefix}{i} "))
            closing = shape.closing(shape.budget)
            if self.end_hold is not None or self.mode == "break_before_end":
                await response.write(b"".join(closing[:-1]))
                if self.mode == "break_before_end":  # the engine dies with only its terminal event left
                    request.transport.close()
                    return response
                await self.end_hold.wait()
                closing = closing[-1:]
            await response.write(b"".join(closing))
        except (ConnectionResetError, asyncio.CancelledError):
            self.streams_aborted += 1
            self.stream_aborted.set()
            raise
        return response


@contextlib.asynccontextmanager
async def running_fake_engine(**kwargs):
    engine = await FakeEngine(**kwargs).start()
    try:
        yield engine
    finally:
        await engine.stop()


def settings_for(engine: FakeEngine, **values):
    """Gateway settings in front of ``engine``: no access log, no background engine polling."""
    from gateway.config import Settings

    return Settings(**{"vllm_base_url": engine.base_url, "access_log": False, "engine_poll_interval": 60,
                       **values})
