"""The gateway's one ASGI middleware: request id, auth, admission, body limit, timing, access log.

Pure ASGI on purpose: it never wraps or buffers the response body (Starlette's
BaseHTTPMiddleware would, costing time per chunk and hiding disconnects). It
touches exactly one response message, the start (to add headers); body chunks
pass straight through. Refusals are written in the error shape of the route
family the path belongs to (``ErrorShapes``). A key is read from ``Authorization:
Bearer`` or ``x-api-key`` (``http.auth``). Control requests (``http.admission.ControlRequests``:
cancels, state lookups) are admitted in a pool of their own, so a key at its in-flight cap can
still stop its generations. A bearer token that is no key may be a feature's end-user token
(``http.auth.TokenAuthenticator``): it is looked up only on the paths its feature names. A
public path needs no key, but a valid key sent to one is still
recognised (``/health`` shows its details only to callers it knows). With ``CORS_ORIGINS``
set, a browser's preflight is answered first, before the body limit, auth and admission (it
carries no key), and answers to allowed origins say so (``http.cors``).

A request that returns without starting a response is one whose client left
first: it is counted and logged as 499 (nginx's "client closed request"), so
impatient clients do not show up as server errors.
"""

from __future__ import annotations

import logging
import os
import re
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.http.admission import Admission, ControlRequests, too_many_requests
from gateway.http.auth import (
    API_KEY_HEADER,
    LOCAL_PRINCIPAL,
    MISSING_KEY,
    KeyRing,
    TokenAuthenticator,
    bearer_token,
    request_keys,
)
from gateway.http.cors import PREFLIGHT, CorsPolicy, is_preflight
from gateway.http.errors import ErrorShapes, GatewayError
from gateway.http.logs import AccessLog, request_id_var
from gateway.http.metrics import Metrics
from gateway.http.timing import ENGINE_WAIT, serving_scope

log = logging.getLogger("gateway.access")
access_log = AccessLog(log)

ALWAYS_PUBLIC = frozenset({"/health", "/livez", "/readyz", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"})
REQUEST_ID_OK = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
CLIENT_CLOSED_REQUEST = 499
# The server's own ``send``, kept in the scope: once a response has started (its headers went
# through every wrapper, this middleware's included), a stream may send its body messages
# here directly, skipping one Python call per body (measured: bench/instructions.py). A wrapper
# that must see body messages replaces this entry with itself wrapped around it.
SERVER_SEND = "gateway.server_send"


def new_request_id() -> str:
    # What secrets.token_hex(12) returns (it reads os.urandom too), in one call instead of four.
    return os.urandom(12).hex()


class GatewayMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        keyring: KeyRing,
        admission: Admission,
        metrics: Metrics,
        error_shapes: ErrorShapes,
        max_body_bytes: int,
        metrics_require_auth: bool,
        access_log: bool = True,
        public_paths: frozenset[str] = frozenset(),
        control_requests: ControlRequests | None = None,
        cors: CorsPolicy | None = None,
        token_authenticators: tuple[TokenAuthenticator, ...] = (),
    ) -> None:
        self.app = app
        self.keyring = keyring
        self.token_authenticators = token_authenticators
        self.admission = admission
        self.control_requests = control_requests or ControlRequests()
        # Same sizes as the requests' pool, counted apart (see gateway.http.admission).
        self.control_admission = Admission(max_inflight=admission.max_inflight,
                                           max_inflight_per_key=admission.max_inflight_per_key)
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes
        # ``public_paths``: exact paths features serve without a key (the playground's files).
        public = ALWAYS_PUBLIC | public_paths
        self.public = public if metrics_require_auth else public | {"/metrics"}
        self.access_log = access_log
        self.error_shapes = error_shapes
        self.cors = cors

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        started = time.perf_counter()
        authorization = api_key = request_id = content_length = origin = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value
            elif name == API_KEY_HEADER:
                api_key = value
            elif name == b"x-request-id":
                request_id = value.decode("latin-1")
            elif name == b"content-length":
                content_length = value
            elif name == b"origin":
                origin = value
        if request_id is None or not REQUEST_ID_OK.match(request_id):
            request_id = new_request_id()
        token = request_id_var.set(request_id)
        scope[ENGINE_WAIT] = 0.0
        scope[SERVER_SEND] = send
        scope_token = serving_scope.set(scope)
        state = scope.setdefault("state", {})
        state["request_id"] = request_id

        status_holder: list[int | None] = [None]
        metrics = self.metrics
        rid_header = (b"x-request-id", request_id.encode())
        cors_headers = self.cors.response_headers(origin) if self.cors is not None else ()

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                status_holder[0] = message["status"]
                added = time.perf_counter() - started - scope[ENGINE_WAIT]
                metrics.overhead.observe(added)
                headers = list(message.get("headers", ()))
                headers.append(rid_header)
                headers.append((b"x-gateway-added-ms", f"{added * 1000:.3f}".encode()))
                headers.extend(cors_headers)
                message = {**message, "headers": headers}
            await send(message)

        path = scope["path"]
        key_id = "-"
        admitted: Admission | None = None  # the pool that admitted the request
        try:
            if self.cors is not None and is_preflight(scope):
                scope["route"] = PREFLIGHT
                headers = self.cors.preflight_headers(origin, scope)
                if headers is not None:
                    # Straight to the server: the preflight's own headers, not an actual answer's.
                    status_holder[0] = 204
                    await send({"type": "http.response.start", "status": 204, "headers": headers})
                    await send({"type": "http.response.body", "body": b""})
                    return
                refusal = self._refused_origin(origin)
            else:
                refusal = self._check_body_size(content_length)
            if refusal is None and path not in self.public:
                principal, refusal = self._authenticate(authorization, api_key)
                if principal is None and self.token_authenticators:
                    principal, refusal = await self._end_user(path, authorization, refusal)
                if principal is None and refusal is not None and refusal.status == 401:
                    metrics.rejected.labels("auth").inc()
                if principal is not None:
                    state["principal"] = principal
                    key_id = principal.key_id
                    if path != "/metrics":
                        pool = self.control_admission if self.control_requests.matches(scope["method"], path) \
                            else self.admission
                        reason = pool.try_enter(key_id)
                        if reason is None:
                            admitted = pool
                        else:
                            metrics.rejected.labels("admission").inc()
                            refusal = too_many_requests(reason)
            elif refusal is None:
                state["principal"] = self._recognise(authorization, api_key)
            if refusal is not None:
                await self.error_shapes.send(path, refusal, send_with_headers)
                return
            if content_length is None and scope["method"] in ("POST", "PUT", "PATCH"):
                receive = self._limited(receive)
            await self.app(scope, receive, send_with_headers)
            if status_holder[0] is None:
                status_holder[0] = CLIENT_CLOSED_REQUEST
        finally:
            if admitted is not None:
                admitted.leave(key_id)
            if status_holder[0] is None:
                status_holder[0] = 500  # the app raised before answering
            elapsed = time.perf_counter() - started
            route = scope.get("route")
            route_label = getattr(route, "path", "unmatched")
            metrics.observe_request(route_label, status_holder[0], elapsed)
            if self.access_log:
                access_log.write({
                    "method": scope["method"],
                    "path": path,
                    "status": status_holder[0],
                    "ms": round(elapsed * 1000, 3),
                    "upstream_ms": round(scope[ENGINE_WAIT] * 1000, 3),
                    "key_id": key_id,
                })
            request_id_var.reset(token)
            serving_scope.reset(scope_token)
            # The server's send is a method of the object that holds this scope: left in it, the
            # pair would be a reference cycle that outlives every request until a full collection.
            scope.pop(SERVER_SEND, None)

    def _authenticate(self, authorization: bytes | None, api_key: bytes | None) -> tuple[Any, GatewayError | None]:
        if not self.keyring.enabled:
            return LOCAL_PRINCIPAL, None
        keys = request_keys(authorization, api_key)
        principal = None
        for key in keys:  # a bearer token or an x-api-key: either one that is a configured key will do
            principal = self.keyring.authenticate(key)
            if principal is not None:
                break
        if principal is None:
            message = MISSING_KEY if not keys else "invalid API key"
            return None, GatewayError(
                401, message, code="invalid_api_key", headers={"www-authenticate": "Bearer"}
            )
        return principal, None

    async def _end_user(self, path: str, authorization: bytes | None,
                        refusal: GatewayError | None) -> tuple[Any, GatewayError | None]:
        """An end-user token's principal, if the bearer token is one and may call ``path``."""
        token = bearer_token(authorization)
        if token is None:
            return None, refusal
        for authenticator in self.token_authenticators:
            if not token.startswith(authenticator.token_prefix):
                continue
            if not path.startswith(authenticator.path_prefixes):
                return None, GatewayError(401, "an end-user token may only call "
                                          + ", ".join(authenticator.path_prefixes), code="invalid_api_key",
                                          headers={"www-authenticate": "Bearer"})
            try:
                principal = await authenticator.authenticate(token)
            except GatewayError as exc:
                return None, exc
            if principal is None:
                return None, GatewayError(401, "invalid, expired or revoked end-user token", code="invalid_api_key",
                                          headers={"www-authenticate": "Bearer"})
            return principal, None
        return None, refusal

    def _refused_origin(self, origin: bytes | None) -> GatewayError:
        """A preflight from an origin CORS_ORIGINS does not name: 403, without CORS headers, saying why."""
        self.metrics.rejected.labels("cors").inc()
        shown = (origin or b"(none)").decode("latin-1")[:200]
        return GatewayError(403, f"origin {shown} may not call this gateway from a browser (CORS_ORIGINS)",
                            code="cors_origin_not_allowed")

    def _recognise(self, authorization: bytes | None, api_key: bytes | None) -> Any:
        """On a public path: the caller's principal if it sent a valid key (or no keys are configured), else None.

        Never a refusal: a public path answers everyone, only what it shows may differ.
        """
        if not self.keyring.enabled:
            return LOCAL_PRINCIPAL
        for key in request_keys(authorization, api_key):
            principal = self.keyring.authenticate(key)
            if principal is not None:
                return principal
        return None

    def _check_body_size(self, content_length: bytes | None) -> GatewayError | None:
        if content_length is None:
            return None
        try:
            size = int(content_length)
        except ValueError:
            return GatewayError(400, "invalid Content-Length header", param="content-length")
        if size > self.max_body_bytes:
            self.metrics.rejected.labels("body_size").inc()
            return GatewayError(
                413,
                f"request body of {size} bytes exceeds the limit of {self.max_body_bytes} bytes",
                code="request_too_large",
            )
        return None

    def _limited(self, receive: Receive) -> Receive:
        """Wrap ``receive`` so a chunked body larger than the limit fails with 413."""
        limit = self.max_body_bytes
        seen = 0

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    self.metrics.rejected.labels("body_size").inc()
                    raise GatewayError(
                        413, f"request body exceeds the limit of {limit} bytes", code="request_too_large"
                    )
            return message

        return limited_receive
