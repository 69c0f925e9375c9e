"""HTTP errors, the error shapes clients parse, and the handlers that make every failure leave in one.

The layers below the protocols raise status-free failures (``gateway.failures``); the HTTP edge
(the middleware, the protocols' own request checks) raises :class:`GatewayError`, a failure
with its status. An error shape is where one route family turns any failure into its answer:
the status (:data:`STATUSES`, which a shape may override) and the body, because each family's
clients parse their own shape:

- OpenAI routes: ``{"error": {"message", "type", "param", "code"}}``, which the OpenAI SDK
  turns into its typed exceptions; validation failures are a 400 in that envelope.
- the Stack 2.9 code API and the marketplace: FastAPI's ``{"detail": ...}``, with
  validation failures as FastAPI's own 422 list.

Protocols register their shape for the paths they serve (:class:`ErrorShapes`), so the
middleware's early refusals (401, 413, 429) and the handlers below agree with the route.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from gateway.failures import (
    Conflict,
    Failure,
    Gone,
    Invalid,
    LimitReached,
    NotFound,
    TimedOut,
    Unavailable,
    UpstreamFailed,
)

log = logging.getLogger("gateway.errors")

# The OpenAI envelope's ``type`` by status (Anthropic's are its protocol's own: ANTHROPIC_TYPES).
# OpenAI words every client error but 401, 403 and 429 as ``invalid_request_error`` (a 404: "No such
# File object: file-abc"; a 409: a batch that cannot be cancelled); its SDK raises by the status
# (NotFoundError, ConflictError, ...), so the type is only what clients that switch on it see.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    409: "invalid_request_error",
    410: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    421: "permission_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    501: "server_error",
    502: "upstream_error",
    503: "service_unavailable",
    504: "timeout_error",
}

# Where OpenAI's ``type`` is not the status's: a spent quota is a 429 of its own type, as api.openai.com
# answers it ({"type": "insufficient_quota", "code": "insufficient_quota"}).
ERROR_TYPES_BY_CODE = {"insufficient_quota": "insufficient_quota"}

JSON_CONTENT_TYPE = b"application/json"


class GatewayError(Failure):
    """A failure with its HTTP status, raised at the HTTP edge; the handlers render it in the route's shape."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        type: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message, param=param, code=code)
        self.status = status
        self.type = type or ERROR_TYPES_BY_CODE.get(code) or ERROR_TYPES.get(status, "server_error")
        self.headers = headers or {}

    def envelope(self) -> dict:
        return error_envelope(self.message, self.type, param=self.param, code=self.code)


def error_envelope(message: str, type: str, *, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


# The status of each kind of failure (``gateway.failures``), unless a shape says otherwise.
STATUSES: dict[type[Failure], int] = {
    Invalid: 400, NotFound: 404, Conflict: 409, Gone: 410, LimitReached: 429,
    UpstreamFailed: 502, Unavailable: 503, TimedOut: 504,
}


def http_error(failure: Failure, statuses: dict[type[Failure], int] = STATUSES) -> GatewayError:
    """``failure`` as the HTTP error that answers it (a ``GatewayError`` as it is)."""
    if isinstance(failure, GatewayError):
        return failure
    upstream = getattr(failure, "upstream_status", None)  # the engine's own refusal: its 4xx passes through
    if upstream is not None:
        status = upstream if 400 <= upstream < 500 else 502
    else:
        status = next((statuses[kind] for kind in type(failure).__mro__ if kind in statuses), 500)
    headers = {"retry-after": f"{failure.retry_after:g}"} if failure.retry_after is not None else None
    error = GatewayError(status, failure.message, param=failure.param, code=failure.code, headers=headers)
    error.__cause__ = failure
    return error


@dataclass(frozen=True, slots=True)
class ErrorShape:
    """How one route family answers a failure: its status, its body, and what a validation failure becomes.

    The one place where a protocol maps the gateway's failures to HTTP."""

    name: str
    body: Callable[[GatewayError], bytes]
    # True: a request that fails validation is a 400 in this shape (OpenAI, Anthropic);
    # False: FastAPI's own 422 with the list of errors, each naming its field.
    validation_is_400: bool
    statuses: dict[type[Failure], int] = field(default_factory=lambda: STATUSES)

    def http(self, failure: Failure) -> GatewayError:
        return http_error(failure, self.statuses)


OPENAI_SHAPE = ErrorShape("openai", lambda error: orjson.dumps(error.envelope()), validation_is_400=True)
DETAIL_SHAPE = ErrorShape("detail", lambda error: orjson.dumps({"detail": error.message}), validation_is_400=False)


class ErrorShapes:
    """The error shape of every path: exact paths, then the longest registered prefix, then the default."""

    def __init__(self, default: ErrorShape = DETAIL_SHAPE) -> None:
        self.default = default
        self._exact: dict[str, ErrorShape] = {}
        self._prefixes: list[tuple[str, ErrorShape]] = []

    def register(self, path: str, shape: ErrorShape) -> None:
        self._exact[path] = shape

    def register_prefix(self, prefix: str, shape: ErrorShape) -> None:
        self._prefixes.append((prefix, shape))
        self._prefixes.sort(key=lambda item: len(item[0]), reverse=True)

    def for_path(self, path: str) -> ErrorShape:
        shape = self._exact.get(path)
        if shape is not None:
            return shape
        for prefix, shape in self._prefixes:
            if path.startswith(prefix):
                return shape
        return self.default

    def response(self, path: str, failure: Failure) -> Response:
        shape = self.for_path(path)
        error = shape.http(failure)
        return Response(shape.body(error), status_code=error.status, media_type="application/json",
                        headers=error.headers)

    async def send(self, path: str, error: Failure, send) -> None:
        """Answer with ``error`` as raw ASGI messages (for code below FastAPI's handlers)."""
        await send_error(self.for_path(path), error, send)


async def send_error(shape: ErrorShape, failure: Failure, send) -> None:
    """Answer with ``failure`` in ``shape``, as raw ASGI messages."""
    error = shape.http(failure)
    body = shape.body(error)
    headers = [(b"content-type", JSON_CONTENT_TYPE), (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in error.headers.items()]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def describe_validation(exc: RequestValidationError) -> tuple[str, str | None]:
    """A readable message that names the offending field(s), and the first field's name."""
    parts = []
    first_param = None
    for err in exc.errors():
        loc = [str(p) for p in err.get("loc", ()) if p not in ("body", "query", "path", "header")]
        field = utf8_text(".".join(loc)) or "body"  # (a body's own key may be no text: "\ud800")
        first_param = first_param or field
        parts.append(f"{field}: {err.get('msg', 'invalid value')}")
    return "; ".join(parts) or "invalid request", first_param


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def utf8_text(text: str) -> str:
    """``text``, with any lone surrogate (JSON's ``"\\ud800"``, which Python's parser lets through, but
    no UTF-8 can hold) written as its escape: what a client sent, echoed in an answer that can be encoded."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode()
    return text


def json_safe(value: object) -> object:
    """``value`` with integers beyond 64 bits as strings (orjson and JSON parsers stop at 64 bits) and
    lone surrogates escaped (:func:`utf8_text`).

    A client that sends ``"limit": 10**20`` or ``"name": "\\ud800"`` must get its 422 naming the
    field, not a 500 from the error renderer choking on its own echo of the input.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if INT64_MIN <= value <= INT64_MAX else str(value)
    if isinstance(value, str):
        return utf8_text(value)
    if isinstance(value, dict):
        return {json_safe(key): json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value


def install_error_handlers(app: FastAPI, shapes: ErrorShapes) -> None:
    @app.exception_handler(Failure)
    async def _gateway_error(request: Request, exc: Failure) -> Response:
        return shapes.response(request.url.path, exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        headers = getattr(exc, "headers", None)
        path = request.url.path
        if shapes.for_path(path) is DETAIL_SHAPE:  # FastAPI's clients may get any JSON as detail
            body = orjson.dumps({"detail": json_safe(exc.detail)}, default=str)
            return Response(body, status_code=exc.status_code, media_type="application/json", headers=headers)
        return shapes.response(path, GatewayError(exc.status_code, str(exc.detail), headers=headers))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
        path = request.url.path
        if shapes.for_path(path).validation_is_400:
            message, param = describe_validation(exc)
            return shapes.response(path, GatewayError(400, message, param=param))
        # FastAPI's own 422 shape: a list of errors, each with its field location.
        return Response(
            orjson.dumps({"detail": json_safe(exc.errors())}, default=str),
            status_code=422,
            media_type="application/json",
        )

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error", extra={"path": request.url.path})
        error = GatewayError(500, "internal error in the gateway", type="server_error")
        return shapes.response(request.url.path, error)
