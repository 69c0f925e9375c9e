"""One error type, the error shapes clients parse, and the handlers that make every error leave in one.

Every failure inside the gateway is a :class:`GatewayError` (status, message, the field it
is about). How it is written depends on the route family, because each family's clients
parse their own shape:

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
from dataclasses import dataclass

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

log = logging.getLogger("gateway.errors")

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    409: "conflict_error",
    410: "gone_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    501: "server_error",
    502: "upstream_error",
    503: "service_unavailable",
    504: "timeout_error",
}

JSON_CONTENT_TYPE = b"application/json"


class GatewayError(Exception):
    """An error with an HTTP status that the handlers render in the route's shape."""

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
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type or ERROR_TYPES.get(status, "server_error")
        self.headers = headers or {}

    def envelope(self) -> dict:
        return error_envelope(self.message, self.type, param=self.param, code=self.code)


def error_envelope(message: str, type: str, *, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


@dataclass(frozen=True, slots=True)
class ErrorShape:
    """How one route family writes an error: the body, and what a validation failure becomes."""

    name: str
    body: Callable[[GatewayError], bytes]
    # True: a request that fails validation is a 400 in this shape (OpenAI, Anthropic);
    # False: FastAPI's own 422 with the list of errors, each naming its field.
    validation_is_400: bool


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

    def response(self, path: str, error: GatewayError) -> Response:
        body = self.for_path(path).body(error)
        return Response(body, status_code=error.status, media_type="application/json", headers=error.headers)

    async def send(self, path: str, error: GatewayError, send) -> None:
        """Answer with ``error`` as raw ASGI messages (for code below FastAPI's handlers)."""
        await send_error(self.for_path(path), error, send)


async def send_error(shape: ErrorShape, error: GatewayError, send) -> None:
    """Answer with ``error`` in ``shape``, as raw ASGI messages."""
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
        field = ".".join(loc) or "body"
        first_param = first_param or field
        parts.append(f"{field}: {err.get('msg', 'invalid value')}")
    return "; ".join(parts) or "invalid request", first_param


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def json_safe(value: object) -> object:
    """``value`` with integers beyond 64 bits as strings: orjson (and JSON parsers) stop at 64 bits.

    A client that sends ``"limit": 10**20`` must get its 422 naming the field, not a 500
    from the error renderer choking on its own echo of the input.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if INT64_MIN <= value <= INT64_MAX else str(value)
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value


def install_error_handlers(app: FastAPI, shapes: ErrorShapes) -> None:
    @app.exception_handler(GatewayError)
    async def _gateway_error(request: Request, exc: GatewayError) -> Response:
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
