"""One error envelope and the handlers that make every error leave through it.

OpenAI routes (``/v1/...``) answer ``{"error": {"message", "type", "param",
"code"}}``, which the OpenAI SDK turns into its typed exceptions. The Stack 2.9
code API and the marketplace keep FastAPI's ``{"detail": ...}`` shape, which
their existing clients parse.
"""

from __future__ import annotations

import logging

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


class GatewayError(Exception):
    """An error with an HTTP status that the handlers render in the right shape."""

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


def is_openai_path(path: str) -> bool:
    return path.startswith("/v1/")


def error_response(path: str, error: GatewayError) -> Response:
    """Render ``error`` in the shape the route family at ``path`` promises."""
    if is_openai_path(path):
        body = orjson.dumps(error.envelope())
    else:
        body = orjson.dumps({"detail": error.message})
    return Response(body, status_code=error.status, media_type="application/json", headers=error.headers)


def json_error_bytes(path: str, error: GatewayError) -> bytes:
    """The body of :func:`error_response`, for pure-ASGI code that sends its own messages."""
    if is_openai_path(path):
        return orjson.dumps(error.envelope())
    return orjson.dumps({"detail": error.message})


def _json_bytes(content: object) -> bytes:
    """``content`` as JSON, with integers beyond 64 bits (which orjson refuses) written as strings.

    A validation error echoes the client's input, so a body with ``"limit": 10**20`` must
    still render as a 422 instead of failing inside the error handler (a 500).
    """
    try:
        return orjson.dumps(content, default=str)
    except orjson.JSONEncodeError:
        return orjson.dumps(_big_ints_as_strings(content), default=str)


def _big_ints_as_strings(value: object) -> object:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and not -(2**63) <= value < 2**64:
        return str(value)
    if isinstance(value, dict):
        return {key: _big_ints_as_strings(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_big_ints_as_strings(item) for item in value]
    return value


def _describe_validation(exc: RequestValidationError) -> tuple[str, str | None]:
    """A readable message that names the offending field(s), and the first field's name."""
    parts = []
    first_param = None
    for err in exc.errors():
        loc = [str(p) for p in err.get("loc", ()) if p not in ("body", "query", "path", "header")]
        field = ".".join(loc) or "body"
        first_param = first_param or field
        parts.append(f"{field}: {err.get('msg', 'invalid value')}")
    return "; ".join(parts) or "invalid request", first_param


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(GatewayError)
    async def _gateway_error(request: Request, exc: GatewayError) -> Response:
        return error_response(request.url.path, exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if not is_openai_path(request.url.path):
            detail = exc.detail
            return Response(
                _json_bytes({"detail": detail}),
                status_code=exc.status_code,
                media_type="application/json",
                headers=getattr(exc, "headers", None),
            )
        error = GatewayError(exc.status_code, str(exc.detail), headers=getattr(exc, "headers", None))
        return error_response(request.url.path, error)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
        if is_openai_path(request.url.path):
            message, param = _describe_validation(exc)
            return error_response(request.url.path, GatewayError(400, message, param=param))
        # FastAPI's own 422 shape: a list of errors, each with its field location.
        return Response(
            _json_bytes({"detail": exc.errors()}),
            status_code=422,
            media_type="application/json",
        )

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error", extra={"path": request.url.path})
        error = GatewayError(500, "internal error in the gateway", type="server_error")
        return error_response(request.url.path, error)
