"""Minimal relays that differ only in their upstream HTTP client (for issue 3's decision).

Each is the same bare ASGI app under uvicorn (uvloop + httptools, no access log): read the
request body, POST it upstream unchanged, send back status and content type, then either the
whole body or, for an event stream, each piece as it arrives. No parsing, no re-encoding.

    python -m bench.relay_servers --client aiohttp --port 9100 --upstream http://127.0.0.1:9000
"""

from __future__ import annotations

import argparse
import itertools

import aiohttp
import httpcore
import httpx
import uvicorn

JSON_HEADERS = [(b"content-type", b"application/json")]
MANY = 1024  # connections: more than any concurrency the benchmark uses


async def _send_start(send, status: int, content_type: bytes, length: int | None) -> None:
    headers = [(b"content-type", content_type)]
    if length is not None:
        headers.append((b"content-length", str(length).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})


class AiohttpRelay:
    """aiohttp.ClientSession with an unlimited-enough TCPConnector."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream

    async def open(self) -> None:
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=MANY, keepalive_timeout=60),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=5), auto_decompress=False)

    async def close(self) -> None:
        await self.session.close()

    async def forward(self, path: str, body: bytes, send) -> None:
        async with self.session.post(self.upstream + path, data=body,
                                     headers={"content-type": "application/json"}) as response:
            content_type = response.headers.get("content-type", "application/json").encode()
            if content_type.startswith(b"text/event-stream"):
                await _send_start(send, response.status, content_type, None)
                async for piece in response.content.iter_any():
                    await send({"type": "http.response.body", "body": piece, "more_body": True})
                await send({"type": "http.response.body", "body": b""})
            else:
                data = await response.read()
                await _send_start(send, response.status, content_type, len(data))
                await send({"type": "http.response.body", "body": data})


class HttpxRelay:
    """httpx.AsyncClient(s), default pool or tuned limits; ``shards`` clients round-robin."""

    def __init__(self, upstream: str, *, limits: httpx.Limits | None = None, shards: int = 1,
                 module=httpx) -> None:
        self.upstream, self.limits, self.shards, self.module = upstream, limits, shards, module

    async def open(self) -> None:
        kwargs = {"http2": False, "trust_env": False, "timeout": self.module.Timeout(None)}
        if self.limits is not None:
            kwargs["limits"] = self.module.Limits(
                max_connections=self.limits.max_connections,
                max_keepalive_connections=self.limits.max_keepalive_connections,
                keepalive_expiry=self.limits.keepalive_expiry)
            kwargs["http1"] = True
        self.clients = [self.module.AsyncClient(**kwargs) for _ in range(self.shards)]
        self.next_client = itertools.cycle(self.clients).__next__

    async def close(self) -> None:
        for client in self.clients:
            await client.aclose()

    async def forward(self, path: str, body: bytes, send) -> None:
        client = self.next_client()
        request = client.build_request("POST", self.upstream + path, content=body,
                                       headers={"content-type": "application/json"})
        response = await client.send(request, stream=True)
        try:
            content_type = response.headers.get("content-type", "application/json").encode()
            if content_type.startswith(b"text/event-stream"):
                await _send_start(send, response.status_code, content_type, None)
                async for piece in response.aiter_raw():
                    await send({"type": "http.response.body", "body": piece, "more_body": True})
                await send({"type": "http.response.body", "body": b""})
            else:
                data = await response.aread()
                await _send_start(send, response.status_code, content_type, len(data))
                await send({"type": "http.response.body", "body": data})
        finally:
            await response.aclose()


class HttpcoreRelay:
    """httpcore.AsyncConnectionPool used directly (httpx's transport without httpx)."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.encode()

    async def open(self) -> None:
        self.pool = httpcore.AsyncConnectionPool(max_connections=MANY,
                                                 max_keepalive_connections=MANY,
                                                 keepalive_expiry=60, http1=True, http2=False)

    async def close(self) -> None:
        await self.pool.aclose()

    async def forward(self, path: str, body: bytes, send) -> None:
        async with self.pool.stream("POST", self.upstream + path.encode(), headers=JSON_HEADERS,
                                    content=body) as response:
            content_type = dict(response.headers).get(b"content-type", b"application/json")
            if content_type.startswith(b"text/event-stream"):
                await _send_start(send, response.status, content_type, None)
                async for piece in response.aiter_stream():
                    await send({"type": "http.response.body", "body": piece, "more_body": True})
                await send({"type": "http.response.body", "body": b""})
            else:
                data = await response.aread()
                await _send_start(send, response.status, content_type, len(data))
                await send({"type": "http.response.body", "body": data})


def _tuned() -> httpx.Limits:
    return httpx.Limits(max_connections=MANY, max_keepalive_connections=MANY, keepalive_expiry=60)


def _httpx2_relay(upstream: str) -> HttpxRelay:
    import httpx2  # the successor package the openai SDK now depends on

    return HttpxRelay(upstream, limits=_tuned(), module=httpx2)


RELAYS = {
    "aiohttp": AiohttpRelay,
    "httpx-default": lambda upstream: HttpxRelay(upstream),
    "httpx-tuned": lambda upstream: HttpxRelay(upstream, limits=_tuned()),
    "httpx-sharded": lambda upstream: HttpxRelay(upstream, limits=_tuned(), shards=8),
    "httpcore": HttpcoreRelay,
    "httpx2-tuned": _httpx2_relay,
}


def build_app(relay):
    """The bare ASGI app shared by every relay: /health, and POST anything -> upstream."""

    async def app(scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await relay.open()
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await relay.close()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["path"] == "/health":
            await _send_start(send, 200, b"text/plain", 0)
            await send({"type": "http.response.body", "body": b""})
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        try:
            await relay.forward(scope["path"], b"".join(chunks), send)
        except (aiohttp.ClientError, httpx.HTTPError, httpcore.NetworkError, OSError):
            await _send_start(send, 502, b"application/json", 2)
            await send({"type": "http.response.body", "body": b"{}"})

    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A minimal relay on one HTTP client.")
    parser.add_argument("--client", choices=sorted(RELAYS), required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    app = build_app(RELAYS[args.client](args.upstream.rstrip("/")))
    uvicorn.run(app, host="127.0.0.1", port=args.port, loop="uvloop", http="httptools",
                access_log=False, log_level="warning", lifespan="on")


if __name__ == "__main__":
    main()
