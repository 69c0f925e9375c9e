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
carries no key), and answers to allowed origins say so (``http.cors``). A web page may not drive
the gateway: a body that is not JSON (or multipart where the route takes it) is refused, and a
keyless gateway answers only requests addressed to this machine (``http.browser_guards``).
``/metrics`` is for an admin key or a ``METRICS_API_KEYS`` key.

A request that returns without starting a response is one whose client left
first: it is counted and logged as 499 (nginx's "client closed request"), so
impatient clients do not show up as server errors.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.failures import Unavailable
from gateway.http import queueing
from gateway.http.admission import Admission, ControlRequests, Slot, too_many_requests
from gateway.http.api_docs import ASSET_PATHS
from gateway.http.auth import (
    API_KEY_HEADER,
    LOCAL_PRINCIPAL,
    MISSING_KEY,
    KeyRing,
    TokenAuthenticator,
    bearer_token,
    request_keys,
)
from gateway.http.browser_guards import HostCheck, content_type_refusal
from gateway.http.context import SCOPE_KEY, RequestContext, StartHook, current
from gateway.http.cors import PREFLIGHT, CorsPolicy, is_preflight
from gateway.http.errors import ErrorShapes, GatewayError
from gateway.http.logs import AccessLog
from gateway.http.metrics import Metrics
from gateway.tracing.hooks import request_ended

if TYPE_CHECKING:
    from gateway.tracing.provider import Tracing

log = logging.getLogger("gateway.access")
access_log = AccessLog(log)

ALWAYS_PUBLIC = frozenset({"/", "/health", "/livez", "/readyz", "/docs", "/openapi.json"}) | ASSET_PATHS
REQUEST_ID_OK = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
CLIENT_CLOSED_REQUEST = 499
AFFINITY_HEADER = b"x-session-affinity"  # requests naming the same value stick to one engine
MAX_AFFINITY_KEY = 256
# A request still unanswered when a stopping server's grace period runs out (the streams' ending says the same).
STOPPED = Unavailable("the gateway shut down before this request was answered; send it again", code="gateway_shutdown",
                      retry_after=1)
# The request headers the middleware reads, each to its slot: one dict lookup per header instead
# of a chain of comparisons (valgrind: 6,700 instructions against 11,100 for a client's 7 headers).
READ_HEADERS = {name: slot for slot, name in enumerate((
    b"authorization", API_KEY_HEADER, b"x-request-id", b"content-length", b"origin", AFFINITY_HEADER, b"host",
    b"content-type"))}


def new_request_id() -> str:
    # What secrets.token_hex(12) returns (it reads os.urandom too), in one call instead of four.
    return os.urandom(12).hex()


class GatewayMiddleware(StartHook):
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
        body_limits: Mapping[str, tuple[int, str]] | None = None,
        access_log: bool = True,
        public_paths: frozenset[str] = frozenset(),
        control_requests: ControlRequests | None = None,
        cors: CorsPolicy | None = None,
        token_authenticators: tuple[TokenAuthenticator, ...] = (),
        host_check: HostCheck | None = None,
        multipart_paths: frozenset[str] = frozenset(),
        metrics_keys: KeyRing | None = None,
        tracing: Tracing | None = None,
        stopping: Callable[[], bool] | None = None,
    ) -> None:
        self.app = app
        # A router that takes the request's context (``RawRouter.dispatch``) is called with it;
        # any other ASGI app gets the scope, and FastAPI routes find the context there.
        self._dispatch = getattr(app, "dispatch", None)
        self.keyring = keyring
        self.token_authenticators = token_authenticators
        self.admission = admission
        self.control_requests = control_requests or ControlRequests()
        # Same sizes as the requests' pool, counted apart (see gateway.http.admission).
        self.control_admission = Admission(max_inflight=admission.max_inflight,
                                           max_inflight_per_key=admission.max_inflight_per_key)
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes
        # Paths with a body limit of their own instead (the file upload): path -> (bytes, the setting's name).
        self.body_limits = dict(body_limits or {})
        # ``public_paths``: exact paths features serve without a key (the playground's files).
        public = ALWAYS_PUBLIC | public_paths
        self.public = public if metrics_require_auth else public | {"/metrics"}
        self.access_log = access_log
        self.error_shapes = error_shapes
        self.cors = cors
        self.host_check = host_check  # a keyless gateway's: only requests addressed to this machine
        self.multipart_paths = multipart_paths
        self.metrics_keys = metrics_keys
        self.tracing = tracing  # None: off (docs/tracing.md)
        self.stopping = stopping  # whether the server is stopping (its drain began)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        started = time.perf_counter()
        found = [None] * len(READ_HEADERS)
        read = READ_HEADERS
        for name, value in scope["headers"]:  # (the last of a repeated header counts)
            slot = read.get(name)
            if slot is not None:
                found[slot] = value
        authorization, api_key, request_id, content_length, origin, affinity, host, content_type = found
        if request_id is not None:
            request_id = request_id.decode("latin-1")
        if request_id is None or not REQUEST_ID_OK.match(request_id):
            request_id = new_request_id()
        if affinity is not None:
            affinity = affinity[:MAX_AFFINITY_KEY].decode("latin-1") or None
        request = RequestContext(request_id, scope=scope, receive=receive, server_send=send, affinity_key=affinity,
                                 hook=self, shapes=self.error_shapes, started=started)
        if self.cors is not None:
            request.response_headers = self.cors.response_headers(origin)
        scope[SCOPE_KEY] = request
        token = current.set(request)
        trace = self.tracing.begin(request, scope) if self.tracing is not None else None

        metrics = self.metrics
        path = scope["path"]
        key_id = "-"
        admitted: Slot | None = None  # the request's place in the pool that admitted it
        try:
            refusal = self.host_check.refusal(host) if self.host_check is not None else None
            if refusal is not None:
                metrics.rejected.labels("host").inc()
            elif self.cors is not None and is_preflight(scope):
                scope["route"] = PREFLIGHT  # (the metrics label; routes set it so too)
                headers = self.cors.preflight_headers(origin, scope)
                if headers is not None:
                    # Straight to the server: the preflight's own headers, not an actual answer's.
                    request.status = 204
                    await send({"type": "http.response.start", "status": 204, "headers": headers})
                    await send({"type": "http.response.body", "body": b""})
                    return
                refusal = self._refused_origin(origin)
            else:
                limit = self.body_limits.get(path) if self.body_limits else None
                refusal = self._check_body_size(content_length, limit) or content_type_refusal(
                    scope["method"], content_type, path, self.multipart_paths)
            if refusal is None and path not in self.public:
                if path == "/metrics":
                    principal, refusal = self._metrics_reader(authorization, api_key)
                else:
                    principal, refusal = self._authenticate(authorization, api_key)
                if principal is None and self.token_authenticators:
                    principal, refusal = await self._end_user(path, authorization, refusal, api_key)
                if principal is not None and path == "/metrics" and not self._may_read_metrics(principal):
                    principal, refusal = None, GatewayError(
                        403, "/metrics needs an admin key or a METRICS_API_KEYS key", code="permission_denied")
                if principal is None and refusal is not None and refusal.status == 401:
                    metrics.rejected.labels("auth").inc()
                if principal is not None:
                    request.principal = principal
                    key_id = principal.key_id
                    if path != "/metrics":
                        pool = self.control_admission if self.control_requests.matches(scope["method"], path) \
                            else self.admission
                        # (With flow control on, generating requests are counted by it, and wait at the caps.)
                        if pool.counts(scope["method"], path):
                            reason = pool.try_enter(key_id)
                            if reason is None:
                                admitted = Slot(pool, key_id)
                                if pool.deferred:  # should it queue after all, it hands the slot over
                                    request.put(admitted)
                            else:
                                metrics.rejected.labels("admission").inc()
                                refusal = too_many_requests(reason)
            elif refusal is None:
                request.principal = self._recognise(authorization, api_key)
            if refusal is not None:
                await self.error_shapes.send(path, refusal, request.send)
                return
            if content_length is None and scope["method"] in ("POST", "PUT", "PATCH"):
                request.receive = self._limited(receive, self.body_limits.get(path) if self.body_limits else None)
            try:
                if self._dispatch is not None:
                    await self._dispatch(request)
                else:
                    await self.app(scope, request.receive, request.send)
            except asyncio.CancelledError:
                # The server's grace period (GRACEFUL_SHUTDOWN_SECONDS) ran out before this request
                # answered (a non-streamed generation, a queued call): uvicorn cancels it and would
                # answer a bare text/plain 500. It gets the 503 of its route's error shape instead.
                if request.status is not None or self.stopping is None or not self.stopping():
                    raise
                await self.error_shapes.send(path, STOPPED, request.send)
                asyncio.current_task().uncancel()  # answered: the cancel ends here, as the request does
            if request.status is None:
                request.status = CLIENT_CLOSED_REQUEST
        finally:
            if admitted is not None:
                admitted.leave()
            status = request.status
            if status is None:
                status = 500  # the app raised before answering
            elapsed = time.perf_counter() - started
            route = request.route or scope.get("route")
            template = getattr(route, "path", None)
            metrics.observe_request(template or "unmatched", status, elapsed)
            request_ended(trace, request, status, template)
            if self.access_log:
                access_log.write({
                    "method": scope["method"],
                    "path": path,
                    "status": status,
                    "ms": round(elapsed * 1000, 3),
                    "upstream_ms": round(request.engine_wait * 1000, 3),
                    "queue_ms": queueing.wait_ms(request),
                    "key_id": key_id,
                })
            current.reset(token)
            # The scope and its context refer to each other (and the context to the server's send, a
            # method of the object that holds this scope): left so, they would be a reference cycle
            # that outlives every request until a full collection.
            del scope[SCOPE_KEY]
            request.scope = request.receive = request.server_send = None

    def started(self, request: RequestContext, message: Message) -> Message:
        """The response start with the request's id, the gateway's own time and CORS headers (``StartHook``)."""
        added = time.perf_counter() - request.started - request.engine_wait
        self.metrics.observe_overhead(added)
        # One list built in one step (the message's own headers may be a shared constant).
        headers = [*message.get("headers", ()), (b"x-request-id", request.request_id.encode()),
                   (b"x-gateway-added-ms", b"%.3f" % (added * 1000)), *request.response_headers]
        return {**message, "headers": headers}

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

    def _metrics_reader(self, authorization: bytes | None, api_key: bytes | None) -> tuple[Any, GatewayError | None]:
        """``/metrics`` (every key's usage): an admin key, or one of ``METRICS_API_KEYS`` (a scraper's)."""
        if self.metrics_keys is not None:
            for key in request_keys(authorization, api_key):
                principal = self.metrics_keys.authenticate(key)
                if principal is not None:
                    return principal, None
        return self._authenticate(authorization, api_key)

    def _may_read_metrics(self, principal: Any) -> bool:
        return principal.role == "admin" or (self.metrics_keys is not None
                                             and principal.key_id in self.metrics_keys.key_ids)

    async def _end_user(self, path: str, authorization: bytes | None, refusal: GatewayError | None,
                        api_key: bytes | None = None) -> tuple[Any, GatewayError | None]:
        """An end-user token's (or a database key's) principal, if the token sent is one and may call ``path``.

        The bearer token, else the ``x-api-key`` (Anthropic's clients send a database key there)."""
        token = bearer_token(authorization)
        if token is None and api_key is not None:
            token = api_key.decode("latin-1").strip() or None
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
                return None, GatewayError(401, f"invalid, expired or revoked {getattr(authenticator, 'kind', 'token')}",
                                          code="invalid_api_key", headers={"www-authenticate": "Bearer"})
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

    def _check_body_size(self, content_length: bytes | None,
                         own: tuple[int, str] | None = None) -> GatewayError | None:
        if content_length is None:
            return None
        try:
            size = int(content_length)
        except ValueError:
            return GatewayError(400, "invalid Content-Length header", param="content-length")
        limit, setting = own or (self.max_body_bytes, "MAX_BODY_BYTES")
        if size > limit:
            self.metrics.rejected.labels("body_size").inc()
            return GatewayError(
                413,
                f"request body of {size} bytes exceeds the limit of {limit} bytes ({setting})",
                code="request_too_large",
            )
        return None

    def _limited(self, receive: Receive, own: tuple[int, str] | None = None) -> Receive:
        """Wrap ``receive`` so a chunked body larger than the limit fails with 413."""
        limit, setting = own or (self.max_body_bytes, "MAX_BODY_BYTES")
        seen = 0

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    self.metrics.rejected.labels("body_size").inc()
                    raise GatewayError(
                        413, f"request body exceeds the limit of {limit} bytes ({setting})", code="request_too_large"
                    )
            return message

        return limited_receive
