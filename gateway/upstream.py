"""The one HTTP client to the engine: a pooled, long-lived aiohttp session.

aiohttp rather than httpx because it was measured: on this machine an httpx
relay spent most of its CPU in connection-pool bookkeeping at 32 concurrent
requests (see the README's "Upstream client" table). httpx stays for tests.

Timeouts are explicit and separate:
- connect: establishing a TCP connection to the engine;
- first byte: until the response headers arrive (for a non-streamed request
  that is the whole generation, so it is generous);
- between chunks: the longest silence tolerated inside a stream.

Failures map to gateway errors with a status a client can act on:
engine unreachable -> 503, engine too slow -> 504, engine broke the exchange
-> 502. An HTTP error answered by the engine itself is ``UpstreamHTTPError``,
carrying the engine's status and message.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextvars import ContextVar
from typing import Any

import aiohttp
import orjson
from yarl import URL

from gateway.config import Settings
from gateway.errors import GatewayError


IDLE_CONNECTION_SECONDS = 4.0

# Time spent waiting for the engine, per request: the gateway middleware puts 0.0 under this
# key of the ASGI scope and points ``serving_scope`` at that scope; ``request_bytes`` adds its
# own waiting to it, whichever route called it, so X-Gateway-Added-Ms counts only the
# gateway's own time. A stream's caller adds the wait for the engine's headers itself.
UPSTREAM_SECONDS = "gateway.upstream_seconds"
serving_scope: ContextVar[dict | None] = ContextVar("serving_scope", default=None)


class UpstreamError(GatewayError):
    """The engine could not be used."""


class EngineUnavailable(UpstreamError):
    def __init__(self, message: str = "the inference engine is unavailable") -> None:
        super().__init__(503, message, code="engine_unavailable")


class EngineTimeout(UpstreamError):
    def __init__(self, message: str = "the inference engine did not answer in time") -> None:
        super().__init__(504, message, code="engine_timeout")


class BadGateway(UpstreamError):
    def __init__(self, message: str = "the inference engine sent an invalid response") -> None:
        super().__init__(502, message, code="bad_gateway")


class UpstreamHTTPError(UpstreamError):
    """The engine answered with an HTTP error; ``body`` is its raw JSON bytes."""

    def __init__(self, status: int, message: str, body: bytes, param: str | None = None, code: Any = None) -> None:
        gateway_status = status if 400 <= status < 500 else 502
        super().__init__(gateway_status, message, param=param, code=code if isinstance(code, str) else None)
        self.upstream_status = status
        self.body = body


def parse_error_body(status: int, body: bytes) -> UpstreamHTTPError:
    """Turn an engine error response (OpenAI envelope, FastAPI detail or text) into an error."""
    message = body.decode("utf-8", "replace")[:2000] or f"engine returned HTTP {status}"
    param = code = None
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        data = None
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict):
            message = str(error.get("message") or message)
            param, code = error.get("param"), error.get("code")
        elif isinstance(data.get("detail"), str):
            message = data["detail"]
        elif isinstance(data.get("message"), str):
            message = data["message"]
    if status >= 500:
        message = f"the inference engine failed: {message}"
    return UpstreamHTTPError(status, message, body, param=param if isinstance(param, str) else None, code=code)


def translate_client_error(exc: BaseException) -> UpstreamError:
    """Map an aiohttp/asyncio failure to the gateway error a client should see."""
    if isinstance(exc, UpstreamError):
        return exc
    if isinstance(exc, (asyncio.TimeoutError, aiohttp.ServerTimeoutError)):
        return EngineTimeout()
    if isinstance(exc, aiohttp.ClientConnectorError):
        return EngineUnavailable(f"the inference engine is unreachable ({exc.os_error.strerror or exc})")
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return BadGateway("the inference engine closed the connection")
    if isinstance(exc, (aiohttp.ClientPayloadError, aiohttp.ClientResponseError)):
        return BadGateway(f"the inference engine sent an invalid response ({exc.__class__.__name__})")
    if isinstance(exc, (aiohttp.ClientError, OSError)):
        return EngineUnavailable(f"the inference engine is unavailable ({exc.__class__.__name__})")
    raise exc


class UpstreamStream:
    """An open streamed response from the engine: raw bytes as they arrive."""

    def __init__(self, response: aiohttp.ClientResponse, chunk_timeout: float) -> None:
        self.response = response
        self.status = response.status
        # After the headers, the read timeout is the between-chunks silence limit.
        if response.connection is not None and response.connection.protocol is not None:
            response.connection.protocol.read_timeout = chunk_timeout

    async def iter_bytes(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self.response.content.iter_any():
                yield chunk
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise translate_client_error(exc) from exc

    def close(self) -> None:
        """Close the connection at once: the engine sees the disconnect and aborts."""
        self.response.close()


class UpstreamClient:
    def __init__(self, settings: Settings) -> None:
        self.base_url = settings.vllm_base_url
        self._settings = settings
        self._session: aiohttp.ClientSession | None = None
        self._urls: dict[str, URL] = {}  # parsed once per path: yarl parsing is per-request cost
        self._headers = {"content-type": "application/json"}
        if settings.vllm_api_key is not None and settings.vllm_api_key.get_secret_value():
            self._headers["authorization"] = f"Bearer {settings.vllm_api_key.get_secret_value()}"
        self.chunk_timeout = settings.upstream_chunk_timeout
        # sock_connect only (not connect, which also arms a timer around taking
        # a pooled connection on every request).
        self._timeout = aiohttp.ClientTimeout(
            total=None,
            sock_connect=settings.upstream_connect_timeout,
            sock_read=settings.upstream_first_byte_timeout,
        )

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(
            limit=self._settings.upstream_max_connections,
            limit_per_host=0,
            # Shorter than vLLM's own idle timeout (uvicorn's 5 s): the gateway drops
            # an idle connection before the engine does, so a request never lands on
            # a connection the engine is closing at that instant (a spurious 502).
            keepalive_timeout=IDLE_CONNECTION_SECONDS,
            ttl_dns_cache=300,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=self._timeout,
            auto_decompress=False,
            skip_auto_headers=("User-Agent", "Accept-Encoding"),
            json_serialize=lambda obj: orjson.dumps(obj).decode(),
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("UpstreamClient.start() was not awaited")
        return self._session

    def url(self, path: str) -> URL:
        url = self._urls.get(path)
        if url is None:
            url = self._urls[path] = URL(self.base_url + path)
        return url

    def _request_headers(self, request_id: str | None) -> dict[str, str]:
        if request_id is None:
            return self._headers
        return {**self._headers, "x-request-id": request_id}

    async def request_bytes(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        *,
        request_id: str | None = None,
        timeout: float | None = None,
    ) -> tuple[int, bytes]:
        """Send ``body``, return (status, response body); the wait counts as engine time."""
        started = time.perf_counter()
        kwargs: dict[str, Any] = {}
        if timeout is not None:
            kwargs["timeout"] = aiohttp.ClientTimeout(total=timeout, sock_connect=min(timeout, self._timeout.sock_connect or timeout))
        try:
            async with self.session.request(
                method, self.url(path), data=body, headers=self._request_headers(request_id), **kwargs
            ) as response:
                payload = await response.read()
                return response.status, payload
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise translate_client_error(exc) from exc
        finally:
            scope = serving_scope.get()
            if scope is not None:
                scope[UPSTREAM_SECONDS] += time.perf_counter() - started

    async def open_stream(self, path: str, body: bytes, *, request_id: str | None = None) -> UpstreamStream:
        """POST ``body`` and return once the engine's response headers are in."""
        try:
            response = await self.session.post(
                self.url(path), data=body, headers=self._request_headers(request_id)
            )
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise translate_client_error(exc) from exc
        return UpstreamStream(response, self.chunk_timeout)

    async def post_json(self, path: str, payload: dict, *, request_id: str | None = None) -> dict:
        """POST a JSON payload; the decoded JSON answer, or an UpstreamError."""
        status, body = await self.request_bytes("POST", path, orjson.dumps(payload), request_id=request_id)
        return self._decode(status, body)

    async def get_json(self, path: str, *, timeout: float | None = None) -> dict:
        status, body = await self.request_bytes("GET", path, timeout=timeout)
        return self._decode(status, body)

    @staticmethod
    def _decode(status: int, body: bytes) -> dict:
        if status >= 400:
            raise parse_error_body(status, body)
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise BadGateway("the inference engine returned a body that is not JSON") from exc
        if not isinstance(data, dict):
            raise BadGateway("the inference engine returned unexpected JSON")
        return data
