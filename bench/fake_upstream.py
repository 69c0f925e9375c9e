"""A fast fake vLLM: the OpenAI-compatible routes in vLLM 0.32's exact shapes, no model.

It exists to isolate the gateway's own cost, so it must be much cheaper than anything it is
compared with: a raw asyncio protocol with httptools parsing under uvloop, responses built
from pre-encoded byte fragments. Field order and shapes were copied from the real engine
(``curl`` against the dev engine, stream on/off, include_usage on/off, n=2).

Every completion generates exactly ``max_tokens`` tokens (finish_reason "length"); streams
send one SSE frame per token per choice, each as its own HTTP chunk, yielding to the event
loop between frames (``--chunk-delay`` seconds of sleep instead, to hold streams open).

    python -m bench.fake_upstream --port 9000 [--model fake-model] [--chunk-delay 0]
"""

from __future__ import annotations

import argparse
import asyncio
import email.utils
import os
import time
from dataclasses import dataclass

import httptools
import orjson

SYSTEM_FINGERPRINT = "vllm-0.32.0-31ce9354"
TOKENS = (" the", " quick", " brown", " fox", " jumps", " over", " lazy", " dog")
DEFAULT_MAX_TOKENS = 16


@dataclass(frozen=True)
class FakeEngineConfig:
    model: str = "fake-model"
    max_model_len: int = 8192
    chunk_delay: float = 0.0  # seconds between stream frames; 0 yields to the loop only


class _BadRequest(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, kind: str = ""):
        super().__init__(message)
        self.status, self.message, self.param = status, message, param
        self.kind = kind or ("NotFoundError" if status == 404 else "BadRequestError")


def _error_body(error: _BadRequest) -> bytes:
    return orjson.dumps(
        {"error": {"message": error.message, "type": error.kind, "param": error.param,
                   "code": error.status}}
    )


def _json(value: object) -> bytes:
    return orjson.dumps(value)


_TOKEN_JSON = [_json(token) for token in TOKENS]
_TEXT_CACHE: dict[int, str] = {}


def _text_of(max_tokens: int) -> str:
    text = _TEXT_CACHE.get(max_tokens)
    if text is None:
        text = "".join(TOKENS[i % len(TOKENS)] for i in range(max_tokens))
        if len(_TEXT_CACHE) < 1024:
            _TEXT_CACHE[max_tokens] = text
    return text


@dataclass
class _Completion:
    """One parsed request: what the response depends on."""

    chat: bool
    stream: bool
    include_usage: bool
    max_tokens: int
    n: int
    prompt_tokens: int
    completion_id: str
    created: int
    model: str


def _parse_request(body: bytes, *, chat: bool, config: FakeEngineConfig,
                   request_id: str | None) -> _Completion:
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise _BadRequest(400, "JSON decode error", "body") from None
    if not isinstance(payload, dict):
        raise _BadRequest(400, "Input should be a valid dictionary", "body")
    model = payload.get("model") or config.model
    if model != config.model:
        raise _BadRequest(404, f"The model `{model}` does not exist. "
                               f"Valid aliases: {config.model}.", "model")
    if chat:
        messages = payload.get("messages")
        if not isinstance(messages, list):
            raise _BadRequest(400, "Input should be a valid list", "body.messages")
        prompt_words = sum(len(str(m.get("content", "")).split()) for m in messages
                           if isinstance(m, dict))
    else:
        prompt = payload.get("prompt")
        if not isinstance(prompt, (str, list)):
            raise _BadRequest(400, "Input should be a valid string", "body.prompt")
        prompt_words = len(str(prompt).split())
    max_tokens = payload.get("max_completion_tokens") or payload.get("max_tokens")
    max_tokens = DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise _BadRequest(400, "max_tokens must be at least 1", "max_tokens")
    n = payload.get("n") or 1
    if not isinstance(n, int) or n < 1:
        raise _BadRequest(400, "n must be at least 1", "n")
    options = payload.get("stream_options") or {}
    suffix = request_id or os.urandom(8).hex()
    return _Completion(
        chat=chat,
        stream=bool(payload.get("stream")),
        include_usage=bool(options.get("include_usage")) if isinstance(options, dict) else False,
        max_tokens=max_tokens,
        n=n,
        prompt_tokens=prompt_words + (10 if chat else 0),  # a chat template adds a few
        completion_id=("chatcmpl-" if chat else "cmpl-") + suffix,
        created=int(time.time()),
        model=model,
    )


def _usage(c: _Completion, *, details: bool) -> dict:
    completion_tokens = c.max_tokens * c.n
    usage = {"prompt_tokens": c.prompt_tokens,
             "total_tokens": c.prompt_tokens + completion_tokens,
             "completion_tokens": completion_tokens}
    if details:
        usage |= {"prompt_tokens_details": None, "completion_tokens_details": None}
    return usage


def render_full_response(c: _Completion) -> bytes:
    """The non-streaming response body, field for field as vLLM 0.32 writes it."""
    text = _text_of(c.max_tokens)
    if c.chat:
        choices = [{"index": i,
                    "message": {"role": "assistant", "content": text, "refusal": None,
                                "annotations": None, "audio": None, "function_call": None,
                                "reasoning": None},
                    "logprobs": None, "finish_reason": "length", "stop_reason": None,
                    "token_ids": None, "routed_experts": None} for i in range(c.n)]
        body = {"id": c.completion_id, "object": "chat.completion", "created": c.created,
                "model": c.model, "choices": choices, "service_tier": None,
                "system_fingerprint": SYSTEM_FINGERPRINT, "usage": _usage(c, details=True),
                "prompt_logprobs": None, "prompt_token_ids": None, "prompt_text": None,
                "kv_transfer_params": None, "ec_transfer_params": None, "metrics": None}
    else:
        choices = [{"index": i, "text": text, "logprobs": None, "finish_reason": "length",
                    "stop_reason": None, "token_ids": None, "prompt_logprobs": None,
                    "prompt_token_ids": None, "routed_experts": None} for i in range(c.n)]
        body = {"id": c.completion_id, "object": "text_completion", "created": c.created,
                "model": c.model, "choices": choices, "service_tier": None,
                "system_fingerprint": SYSTEM_FINGERPRINT, "usage": _usage(c, details=True),
                "kv_transfer_params": None, "ec_transfer_params": None, "metrics": None}
    return _json(body)


def iter_stream_frames(c: _Completion):
    """The SSE frames of a streamed completion, as vLLM 0.32 sends them."""
    obj = b"chat.completion.chunk" if c.chat else b"text_completion"
    head = (b'data: {"id":' + _json(c.completion_id) + b',"object":"' + obj + b'","created":'
            + str(c.created).encode() + b',"model":' + _json(c.model) + b',"choices":[')
    fingerprint = b',"system_fingerprint":"' + SYSTEM_FINGERPRINT.encode() + b'"'
    if c.chat:
        for i in range(c.n):
            yield (head + b'{"index":%d,"delta":{"role":"assistant","content":""},'
                   b'"logprobs":null,"finish_reason":null}],'
                   b'"prompt_token_ids":null,"prompt_text":null}\n\n' % i)
    last = c.max_tokens - 1
    for step in range(c.max_tokens):
        token = _TOKEN_JSON[step % len(_TOKEN_JSON)]
        for i in range(c.n):
            if c.chat:
                choice = b'{"index":%d,"delta":{"content":%s},"logprobs":null,' % (i, token)
                if step < last:
                    yield head + choice + b'"finish_reason":null,"token_ids":null}]}\n\n'
                    continue
                choice += b'"finish_reason":"length","stop_reason":null,"token_ids":null}]'
            else:
                choice = b'{"index":%d,"text":%s,"logprobs":null,' % (i, token)
                if step < last:
                    yield (head + choice + b'"finish_reason":null,"stop_reason":null,'
                           b'"prompt_token_ids":null,"token_ids":null}]}\n\n')
                    continue
                choice += (b'"finish_reason":"length","stop_reason":null,'
                           b'"prompt_token_ids":null,"token_ids":null}]')
            yield head + choice + (b"}\n\n" if c.include_usage else fingerprint + b"}\n\n")
    if c.include_usage:
        yield (head + b'],"usage":' + _json(_usage(c, details=False)) + fingerprint + b"}\n\n")
    yield b"data: [DONE]\n\n"


def render_models(config: FakeEngineConfig, created: int) -> bytes:
    """GET /v1/models in vLLM's shape (with max_model_len)."""
    permission = {"id": "modelperm-" + os.urandom(8).hex(), "object": "model_permission",
                  "created": created, "allow_create_engine": False, "allow_sampling": True,
                  "allow_logprobs": True, "allow_search_indices": False, "allow_view": True,
                  "allow_fine_tuning": False, "organization": "*", "group": None,
                  "is_blocking": False}
    return _json({"object": "list", "data": [
        {"id": config.model, "object": "model", "created": created, "owned_by": "vllm",
         "root": config.model, "parent": None, "max_model_len": config.max_model_len,
         "permission": [permission]}]})


_REASONS = {200: b"OK", 400: b"Bad Request", 404: b"Not Found", 405: b"Method Not Allowed"}


class _DateHeader:
    """The Date header, formatted once a second rather than once a response."""

    def __init__(self) -> None:
        self._second = 0
        self._value = b""

    def get(self) -> bytes:
        now = int(time.time())
        if now != self._second:
            self._second = now
            self._value = email.utils.formatdate(now, usegmt=True).encode()
        return self._value


class FakeUpstreamProtocol(asyncio.Protocol):
    """One HTTP/1.1 keep-alive connection; requests are answered in order."""

    def __init__(self, config: FakeEngineConfig, date: _DateHeader) -> None:
        self.config, self.date = config, date
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.pending: asyncio.Queue | None = None
        self.worker: asyncio.Task | None = None
        self.can_write = asyncio.Event()
        self.can_write.set()
        self._url = b""
        self._headers: dict[bytes, bytes] = {}
        self._body: list[bytes] = []

    # -- asyncio.Protocol ----------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.transport.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.worker is not None:
            self.worker.cancel()
        self.can_write.set()

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()

    # -- httptools callbacks --------------------------------------------------
    def on_message_begin(self) -> None:
        self._url, self._headers, self._body = b"", {}, []

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.lower()] = value

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        request = (self.parser.get_method(), self._url.split(b"?", 1)[0], self._headers,
                   b"".join(self._body), self.parser.should_keep_alive())
        if self.pending is not None:  # a stream is being sent: answer in order, later
            self.pending.put_nowait(request)
            return
        completion = self._answer_or_defer(request)
        if completion is not None:
            self.pending = asyncio.Queue()
            self.worker = asyncio.get_running_loop().create_task(
                self._stream_then_drain(completion, keep_alive=request[4]))

    # -- dispatch ----------------------------------------------------------------
    def _answer_or_defer(self, request: tuple) -> _Completion | None:
        """Answer a request at once, or return the completion to stream."""
        method, path, headers, body, keep_alive = request
        if method == b"POST" and path in (b"/v1/chat/completions", b"/v1/completions"):
            try:
                completion = _parse_request(
                    body, chat=path == b"/v1/chat/completions", config=self.config,
                    request_id=(headers.get(b"x-request-id") or b"").decode() or None)
            except _BadRequest as error:
                self._respond(error.status, _error_body(error), keep_alive)
                return None
            if completion.stream:
                return completion
            self._respond(200, render_full_response(completion), keep_alive)
        elif path == b"/health" and method == b"GET":
            self._respond(200, b"", keep_alive, content_type=None)
        elif path == b"/v1/models" and method == b"GET":
            self._respond(200, render_models(self.config, int(time.time())), keep_alive)
        else:
            self._respond(404, b'{"detail":"Not Found"}', keep_alive)
        return None

    async def _stream_then_drain(self, completion: _Completion, *, keep_alive: bool) -> None:
        while completion is not None:
            await self._stream(completion, keep_alive=keep_alive)
            completion = None
            while completion is None and not self.pending.empty():
                request = self.pending.get_nowait()
                keep_alive = request[4]
                completion = self._answer_or_defer(request)
        self.worker, self.pending = None, None

    def _respond(self, status: int, body: bytes, keep_alive: bool,
                 content_type: bytes | None = b"application/json") -> None:
        head = [b"HTTP/1.1 %d %s\r\ndate: %s\r\nserver: uvicorn\r\ncontent-length: %d\r\n"
                % (status, _REASONS.get(status, b"Error"), self.date.get(), len(body))]
        if content_type:
            head.append(b"content-type: " + content_type + b"\r\n")
        if not keep_alive:
            head.append(b"connection: close\r\n")
        self.transport.write(b"".join(head) + b"\r\n" + body)
        if not keep_alive:
            self.transport.close()

    async def _stream(self, completion: _Completion, *, keep_alive: bool) -> None:
        transport, delay = self.transport, self.config.chunk_delay
        transport.write(b"HTTP/1.1 200 OK\r\ndate: " + self.date.get() + b"\r\nserver: uvicorn\r\n"
                        b"content-type: text/event-stream; charset=utf-8\r\n"
                        b"transfer-encoding: chunked\r\n\r\n")
        for frame in iter_stream_frames(completion):
            if transport.is_closing():
                return
            transport.write(b"%x\r\n%s\r\n" % (len(frame), frame))
            # Yield between frames, as a real engine does between decoding steps.
            await asyncio.sleep(delay)
            if not self.can_write.is_set():
                await self.can_write.wait()
        transport.write(b"0\r\n\r\n")
        if not keep_alive:
            transport.close()


async def serve(*, host: str, port: int, config: FakeEngineConfig) -> asyncio.Server:
    """Start listening; the caller keeps the loop running."""
    date = _DateHeader()
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: FakeUpstreamProtocol(config, date), host, port,
                                    backlog=4096, reuse_address=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--model", default="fake-model")
    parser.add_argument("--max-model-len", type=int, default=8192)
    parser.add_argument("--chunk-delay", type=float, default=0.0,
                        help="seconds between stream frames (default 0: no delay)")
    args = parser.parse_args(argv)
    config = FakeEngineConfig(model=args.model, max_model_len=args.max_model_len,
                              chunk_delay=args.chunk_delay)

    async def run_forever() -> None:
        server = await serve(host=args.host, port=args.port, config=config)
        async with server:
            await server.serve_forever()

    import uvloop

    uvloop.run(run_forever())


if __name__ == "__main__":
    main()
