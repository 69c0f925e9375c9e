"""What can go wrong talking to an engine, as failures a client can act on (``gateway.failures``).

The engine unreachable (:class:`EngineUnavailable`, an ``Unavailable``), too slow
(:class:`EngineTimeout`, a ``TimedOut``), or broke the exchange (:class:`BadGateway`, an
``UpstreamFailed``); each protocol's error shape says which status answers them (503, 504,
502). An HTTP error answered by the engine itself is :class:`EngineHTTPError`, carrying the
engine's status and its raw body (relayed to clients as the engine wrote it).

Each failure also has a ``kind`` (a short word, safe in metric labels and public bodies) that
says what happened to the exchange; the fleet retries on another engine only the kinds that
prove nothing was generated for the client yet (``RETRYABLE``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import orjson

from gateway.failures import Failure, TimedOut, Unavailable, UpstreamFailed

# Failure kinds. A refused or timed-out connection, a reset or a closed connection, a broken
# or garbled response: the engine produced nothing the client has seen, so another engine may
# serve the request. A timeout waiting for the answer is not retried: the engine may still be
# generating, and the client's time is spent.
REFUSED = "refused"
CONNECT_TIMEOUT = "connect_timeout"
RESET = "reset"
DISCONNECTED = "disconnected"
BAD_RESPONSE = "bad_response"
TIMEOUT = "timeout"
STALLED = "stalled"            # a stream fell silent for longer than UPSTREAM_CHUNK_TIMEOUT
ENDED_EARLY = "ended_early"    # a stream stopped without its terminal event
HTTP_503 = "http_503"
NO_ENGINE = "no_engine"
RETRYABLE = frozenset({REFUSED, CONNECT_TIMEOUT, RESET, DISCONNECTED, BAD_RESPONSE})


class EngineError(Failure):
    """The engine could not be used."""

    kind = "error"


class EngineUnavailable(EngineError, Unavailable):
    def __init__(self, message: str = "the inference engine is unavailable", *, kind: str = REFUSED) -> None:
        super().__init__(message, code="engine_unavailable")
        self.kind = kind


class EngineTimeout(EngineError, TimedOut):
    def __init__(self, message: str = "the inference engine did not answer in time", *, kind: str = TIMEOUT) -> None:
        super().__init__(message, code="engine_timeout")
        self.kind = kind


class BadGateway(EngineError, UpstreamFailed):
    def __init__(self, message: str = "the inference engine sent an invalid response", *,
                 kind: str = BAD_RESPONSE) -> None:
        super().__init__(message, code="bad_gateway")
        self.kind = kind


class EngineHTTPError(EngineError):
    """The engine answered with an HTTP error; ``upstream_status`` is its status, ``body`` its raw JSON bytes.

    Error shapes relay an engine's 4xx with its own status and answer any other with 502."""

    def __init__(self, status: int, message: str, body: bytes, param: str | None = None, code: Any = None) -> None:
        super().__init__(message, param=param, code=code if isinstance(code, str) else None)
        self.upstream_status = status
        self.body = body
        self.kind = HTTP_503 if status == 503 else f"http_{status}"


def parse_error_body(status: int, body: bytes) -> EngineHTTPError:
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
    return EngineHTTPError(status, message, body, param=param if isinstance(param, str) else None, code=code)


def translate_client_error(exc: BaseException) -> EngineError:
    """Map an aiohttp/asyncio failure to the gateway error a client should see."""
    if isinstance(exc, EngineError):
        return exc
    if isinstance(exc, aiohttp.ConnectionTimeoutError):  # nothing was sent: the engine is unavailable
        return EngineUnavailable("the inference engine is unreachable (no connection within "
                                 "UPSTREAM_CONNECT_TIMEOUT)", kind=CONNECT_TIMEOUT)
    if isinstance(exc, (asyncio.TimeoutError, aiohttp.ServerTimeoutError)):
        return EngineTimeout()
    if isinstance(exc, aiohttp.ClientConnectorError):
        return EngineUnavailable(f"the inference engine is unreachable ({exc.os_error.strerror or exc})")
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return BadGateway("the inference engine closed the connection", kind=DISCONNECTED)
    if isinstance(exc, (aiohttp.ClientPayloadError, aiohttp.ClientResponseError)):
        return BadGateway(f"the inference engine sent an invalid response ({exc.__class__.__name__})")
    if isinstance(exc, (aiohttp.ClientError, OSError)):
        return EngineUnavailable(f"the inference engine is unavailable ({exc.__class__.__name__})", kind=RESET)
    raise exc
