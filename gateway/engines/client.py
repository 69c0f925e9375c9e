"""The HTTP client to an engine: a pooled, long-lived aiohttp session.

aiohttp rather than httpx because it was measured: on this machine an httpx
relay spent most of its CPU in connection-pool bookkeeping at 32 concurrent
requests (see docs/benchmarks.md, "Upstream client"). httpx stays for tests.

Timeouts are explicit and separate:
- connect: establishing a TCP connection to the engine;
- first byte: until the response headers arrive (for a non-streamed request
  that is the whole generation, so it is generous);
- between chunks: the longest silence tolerated inside a stream.

Failures become the errors of ``gateway.engines.errors``. Time spent waiting for
the engine counts as engine time of the request being served (``http.timing``).
"""

from __future__ import annotations

import time
from typing import Any

import aiohttp
import orjson
from yarl import URL

from gateway.config import Settings
from gateway.engines.errors import BadGateway, EngineError, EngineHTTPError, parse_error_body, translate_client_error
from gateway.engines.routing import RouteHints
from gateway.http.timing import add_engine_wait

IDLE_CONNECTION_SECONDS = 4.0


class EngineStream:
    """An open streamed response from the engine: raw bytes as they arrive."""

    def __init__(self, response: aiohttp.ClientResponse, chunk_timeout: float) -> None:
        self.response = response
        self._content = response.content
        self.status = response.status
        # After the headers, the read timeout is the between-chunks silence limit.
        if response.connection is not None and response.connection.protocol is not None:
            response.connection.protocol.read_timeout = chunk_timeout

    # The streaming loop reads ``content.readany()`` itself (one awaited call per read, no
    # wrapper) and turns these into the gateway's errors with ``failure``.
    errors = (TimeoutError, aiohttp.ClientError, OSError)

    @property
    def readany(self):
        """``await stream.readany()``: the bytes that arrived since the last read; b"" at the end."""
        return self._content.readany

    @staticmethod
    def failure(exc: BaseException) -> EngineError:
        return translate_client_error(exc)

    async def refusal(self) -> EngineHTTPError:
        """The engine's HTTP error, for a stream whose status says it refused the request (closed then)."""
        try:
            body = await self.response.read()
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise translate_client_error(exc) from exc
        finally:
            self.close()
        return parse_error_body(self.status, body)

    def close(self) -> None:
        """Close the connection at once: the engine sees the disconnect and aborts."""
        self.response.close()


class EngineClient:
    """The engines as the rest of the gateway calls them (one engine today; ``route`` hints are
    for a fleet's router and change nothing here)."""

    def __init__(self, settings: Settings) -> None:
        self.base_url = settings.vllm_base_url
        self._settings = settings
        self._pool: aiohttp.ClientSession | None = None
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
        self._pool = aiohttp.ClientSession(
            connector=connector,
            timeout=self._timeout,
            auto_decompress=False,
            skip_auto_headers=("User-Agent", "Accept-Encoding"),
            json_serialize=lambda obj: orjson.dumps(obj).decode(),
        )

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    @property
    def pool(self) -> aiohttp.ClientSession:
        if self._pool is None:
            raise RuntimeError("EngineClient.start() was not awaited")
        return self._pool

    def url(self, path: str) -> URL:
        url = self._urls.get(path)
        if url is None:
            url = self._urls[path] = URL(self.base_url + path)
        return url

    def _request_headers(self, request_id: str | None, content_type: str | None = None) -> dict[str, str]:
        if request_id is None and content_type is None:
            return self._headers
        headers = dict(self._headers)
        if request_id is not None:
            headers["x-request-id"] = request_id
        if content_type is not None:  # a body that is not JSON (multipart audio uploads)
            headers["content-type"] = content_type
        return headers

    async def request_bytes(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        *,
        request_id: str | None = None,
        timeout: float | None = None,
        route: RouteHints | None = None,
        content_type: str | None = None,
    ) -> tuple[int, bytes]:
        """Send ``body``, return (status, response body); the wait counts as engine time.

        ``content_type``: the body's, when it is not JSON (it is relayed as the client sent it).
        """
        started = time.perf_counter()
        kwargs: dict[str, Any] = {}
        if timeout is not None:
            connect = min(timeout, self._timeout.sock_connect or timeout)
            kwargs["timeout"] = aiohttp.ClientTimeout(total=timeout, sock_connect=connect)
        try:
            async with self.pool.request(
                method, self.url(path), data=body, headers=self._request_headers(request_id, content_type), **kwargs
            ) as response:
                payload = await response.read()
                return response.status, payload
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise translate_client_error(exc) from exc
        finally:
            add_engine_wait(time.perf_counter() - started)

    async def open_stream(self, path: str, body: bytes, *, request_id: str | None = None,
                          route: RouteHints | None = None, method: str = "POST") -> EngineStream:
        """Send ``body`` (POST, or ``method``) and return once the engine's response headers are in."""
        try:
            response = await self.pool.request(
                method, self.url(path), data=body, headers=self._request_headers(request_id)
            )
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise translate_client_error(exc) from exc
        return EngineStream(response, self.chunk_timeout)

    async def post_json(self, path: str, payload: dict, *, request_id: str | None = None,
                        route: RouteHints | None = None) -> dict:
        """POST a JSON payload; the decoded JSON answer, or an EngineError."""
        status, body = await self.request_bytes("POST", path, orjson.dumps(payload), request_id=request_id,
                                                route=route)
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
