"""Cross-origin calls from web pages (CORS): which pages may call the gateway, what they may send and read.

A page on another origin (``https://app.example.com`` calling the gateway at
``https://llm.example.com``) can read an answer only when the answer says its origin may,
and before any request with an API key or a JSON body its browser first asks with a
preflight (``OPTIONS`` + ``Access-Control-Request-Method``), which carries no key. So:

- Off unless ``CORS_ORIGINS`` is set: no CORS header at all, browsers keep pages of other
  origins out (the default of every server, and of vLLM).
- ``CORS_ORIGINS`` names exact origins (normalised by ``gateway.config.normal_origin``), or
  ``*`` alone for any page. A preflight from an allowed origin is answered at once by the
  middleware, before auth and admission (204, what may be sent, cached ``MAX_AGE`` seconds); one
  from any other origin gets a 403 saying why, which the browser shows as a CORS failure.
- Every answer to an allowed origin, refusals included (a page must be able to read a 401 or a
  429's ``Retry-After``), names the origin and exposes the gateway's own headers.
- Never ``Access-Control-Allow-Credentials``: keys travel in a header set by the page
  (``Authorization`` or ``x-api-key``), never in cookies, so a page never needs the browser's
  credentials mode, and ``*`` stays safe from cookie-riding pages.

The headers a page may send are those the official SDKs and the gateway's own routes read
(``ALLOWED_HEADERS``), plus any ``x-stainless-*`` header: the OpenAI and Anthropic JavaScript
SDKs send a changing set of those (``X-Stainless-Lang``, ``-Retry-Count``, ``-Timeout``, ...),
and a browser refuses the whole request when a single one is not allowed.
"""

from __future__ import annotations

from starlette.types import Scope

from gateway.config import Settings

ALLOWED_METHODS = b"GET, POST, PUT, PATCH, DELETE"
ALLOWED_HEADERS = (
    "authorization", "x-api-key", "content-type", "last-event-id", "x-request-id", "x-session-affinity",
    "openai-beta", "openai-organization", "openai-project", "idempotency-key",
    "anthropic-version", "anthropic-beta", "anthropic-dangerous-direct-browser-access",
)
SDK_HEADER_PREFIX = "x-stainless-"
# What a page may read of an answer, beyond the CORS-safelisted headers (Content-Type, ...).
EXPOSED_HEADERS = (b"x-request-id, x-gateway-added-ms, x-session-id, retry-after, x-gateway-output-limit-lowered,"
                   b" x-trace-id")
MAX_AGE = b"600"  # seconds a browser may reuse a preflight's answer (Chromium caps it at 7200)
MAX_REQUESTED = 4096  # bytes of Access-Control-Request-Headers read; no browser sends more


class PreflightLabel:
    """``scope["route"]`` of a preflight, for metrics and logs (``.path``, as routes have)."""

    path = "preflight"


PREFLIGHT = PreflightLabel()


class CorsPolicy:
    def __init__(self, origins: list[str]) -> None:
        self.any_origin = origins == ["*"]
        self.origins = frozenset(origin.encode() for origin in origins if origin != "*")
        self._allowed_headers = ", ".join(ALLOWED_HEADERS).encode()
        # An answer that depends on Origin must say so, or a shared cache could give a page an
        # answer meant for another origin (or one without the header it needs).
        self._vary = [] if self.any_origin else [(b"vary", b"origin")]

    @classmethod
    def from_settings(cls, settings: Settings) -> "CorsPolicy | None":
        return cls(settings.cors_origins) if settings.cors_origins else None

    def allows(self, origin: bytes | None) -> bool:
        return origin is not None and (self.any_origin or origin in self.origins)

    def response_headers(self, origin: bytes | None) -> list[tuple[bytes, bytes]]:
        """Headers to add to an answer to a request from ``origin`` (None: it sent no Origin)."""
        if not self.allows(origin):
            return self._vary
        return [(b"access-control-allow-origin", b"*" if self.any_origin else origin),
                (b"access-control-expose-headers", EXPOSED_HEADERS), *self._vary]

    def preflight_headers(self, origin: bytes | None, scope: Scope) -> list[tuple[bytes, bytes]] | None:
        """The headers of the answer to a preflight from ``origin``; None if that origin is not allowed."""
        if not self.allows(origin):
            return None
        requested = private_network = None
        for name, value in scope["headers"]:
            if name == b"access-control-request-headers":
                requested = value[:MAX_REQUESTED]
            elif name == b"access-control-request-private-network":
                private_network = value
        allowed = self._allowed_headers
        sdk_headers = sdk_headers_in(requested)
        if sdk_headers:
            allowed += b", " + b", ".join(sdk_headers)
        headers = [(b"access-control-allow-origin", b"*" if self.any_origin else origin),
                   (b"access-control-allow-methods", ALLOWED_METHODS),
                   (b"access-control-allow-headers", allowed),
                   (b"access-control-max-age", MAX_AGE),
                   (b"vary", b"origin, access-control-request-headers, access-control-request-private-network")]
        if private_network == b"true":  # a public page calling a gateway on a private address (Chromium)
            headers.append((b"access-control-allow-private-network", b"true"))
        return headers


def is_preflight(scope: Scope) -> bool:
    """An ``OPTIONS`` request asking whether another request may be sent (``Access-Control-Request-Method``)."""
    return scope["method"] == "OPTIONS" and any(name == b"access-control-request-method"
                                                for name, _ in scope["headers"])


def sdk_headers_in(requested: bytes | None) -> list[bytes]:
    """The ``x-stainless-*`` names among a preflight's requested headers (letters, digits and dashes only)."""
    if not requested:
        return []
    names = (name.strip().lower() for name in requested.split(b","))
    return [name for name in names
            if name.startswith(SDK_HEADER_PREFIX.encode()) and name.replace(b"-", b"").isalnum()]
