"""The engines as the rest of the gateway calls them: one pooled HTTP client, a router, failover.

aiohttp rather than httpx because it was measured: on this machine an httpx relay spent
most of its CPU in connection-pool bookkeeping at 32 concurrent requests (see the README's
"Upstream client"). httpx stays for tests. One ``ClientSession`` serves every engine (its
connector pools per host).

Every call names its routing hints (``engines.routing``); the router picks the engine
(``engines.router``). Failover: when the chosen engine refuses the connection, resets or
closes it, sends a broken response or answers 503 before anything reached the client, the
request goes to another engine, at most ``ENGINE_MAX_ATTEMPTS`` engines in all, and the
failed engine is ejected for a while (``engines.engine``). A non-streamed request has sent
nothing to its client until the engine's whole answer is in, so an engine dying in the
middle of one is retried too; a stream is retried only until its response headers (after
that, the stream runner may continue it elsewhere: ``relay.switch``). A timeout waiting for the answer is
not retried: the engine may still be generating, and the client's time is spent.

Timeouts are explicit and separate: connect (then 503), first byte (the response headers;
for a non-streamed request the whole generation, so generous; then 504), and between chunks
(the longest silence inside a stream). Every call may name the request it serves (its
``RequestContext``): the engine gets its id, and the time spent waiting counts as engine time
of that request (``X-Gateway-Added-Ms`` leaves it out).

Time to first token (``gateway_time_to_first_token_seconds``): from the start of
``open_stream`` (routing, retries and connecting included) to the first bytes of the body, on
the engine routes whose first streamed bytes vLLM sends only with the first token (a
Responses stream opens with ``response.created`` before any token: not counted).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import orjson

from gateway.config import Settings
from gateway.engines.engine import Engine
from gateway.engines.errors import (
    ENDED_EARLY,
    HTTP_503,
    RETRYABLE,
    STALLED,
    BadGateway,
    EngineError,
    EngineUnavailable,
    parse_error_body,
    translate_client_error,
)
from gateway.engines.fleet import Fleet
from gateway.engines.router import AFFINITY_HITS, Router
from gateway.engines.routing import RouteHints, openai_hints
from gateway.engines.stream import EngineStream, Refused
from gateway.http import queueing
from gateway.http.context import RequestContext
from gateway.tracing import hooks as tracing

__all__ = ["EngineClient", "EngineStream"]

IDLE_CONNECTION_SECONDS = 4.0
MODELS_PATH = "/v1/models"
# Engine routes whose first streamed bytes carry the first token (vLLM 0.32's chat, completion
# and Anthropic messages streams write nothing before the first output).
FIRST_TOKEN_PATHS = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/messages"})
# Failures that say the engine is broken (not merely slow or refusing one request): eject it.
EJECTING = RETRYABLE | {HTTP_503, STALLED, ENDED_EARLY}
RETRIED = RETRYABLE | {HTTP_503}


class EngineClient:
    """What protocols call (``core.engines``): requests to the fleet, routed by their hints."""

    def __init__(self, settings: Settings, fleet: Fleet | None = None, *, router: Router | None = None,
                 metrics=None) -> None:
        self._settings = settings
        self.fleet = fleet if fleet is not None else Fleet.from_settings(settings, metrics=metrics)
        self.router = router if router is not None else Router.from_settings(settings, self.fleet, metrics=metrics)
        self._metrics = metrics
        self.max_attempts = settings.engine_max_attempts
        # Called (and awaited) when no engine can take a request, before refusing it: the
        # engine state looks again, in case an engine came up since its last look.
        self.when_none_ready: Callable[[], Awaitable[None]] | None = None
        self._pool: aiohttp.ClientSession | None = None
        self.chunk_timeout = settings.upstream_chunk_timeout
        # sock_connect only (not connect, which also arms a timer around taking
        # a pooled connection on every request).
        self._timeout = aiohttp.ClientTimeout(
            total=None,
            sock_connect=settings.upstream_connect_timeout,
            sock_read=settings.upstream_first_byte_timeout,
        )

    @property
    def base_url(self) -> str:
        """The first engine's address (what a single-engine gateway calls ``VLLM_BASE_URL``)."""
        return self.fleet.engines[0].base_url if self.fleet.engines else self._settings.vllm_base_url

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

    # --- choosing engines ------------------------------------------------------------------
    async def _first(self, route: RouteHints | None, request: RequestContext | None = None) -> Engine:
        # A request granted an engine by flow control starts there (failover may still move it).
        engine = queueing.granted_engine(request, route)
        if engine is not None:  # (the trace's routing receipt says so, and whether the router's pick hit)
            self.router.last_reason, self.router.last_candidates = "flow_control_grant", []
            self.router.last_affinity_hit = queueing.granted_reason(request) in AFFINITY_HITS
        else:
            engine = self.router.pick(route)
        if engine is None and self.when_none_ready is not None:
            await self.when_none_ready()
            engine = self.router.pick(route)
        if engine is None:
            raise self.router.unavailable(route)
        return engine

    def _pinned(self, engine_id: str) -> Engine:
        engine = self.fleet.get(engine_id)
        if engine is None:
            raise EngineUnavailable(f"the inference engine {engine_id} left the fleet")
        return engine

    def _next_after(self, engine: Engine, error: EngineError, route: RouteHints | None,
                    tried: list[Engine], request: RequestContext | None = None) -> Engine | None:
        """``engine`` failed before the client saw anything: the engine to try next, or None."""
        tracing.engine_failed(request, error)
        kind = error.kind
        if kind in EJECTING:
            self.fleet.failed(engine, kind, error.message)
        else:
            engine.counters.error(kind)
        tried.append(engine)
        if kind not in RETRIED or len(tried) >= self.max_attempts:
            return None
        following = self.router.pick(route, tried)
        if following is not None:
            engine.counters.retries.inc()
        return following

    # --- requests -------------------------------------------------------------------------
    async def request_bytes(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        *,
        request: RequestContext | None = None,
        request_id: str | None = None,
        timeout: float | None = None,
        route: RouteHints | None = None,
        content_type: str | None = None,
    ) -> tuple[int, bytes]:
        """Send ``body``, return (status, response body); the wait counts as ``request``'s engine time.

        ``request_id``: the id to send when no ``request`` is named (the engine layer's own looks, features).
        ``content_type``: the body's, when it is not JSON (it is relayed as the client sent it).
        """
        started = time.perf_counter()
        if request is not None:
            request_id = request.request_id
        kwargs: dict[str, Any] = {}
        if timeout is not None:
            connect = min(timeout, self._timeout.sock_connect or timeout)
            kwargs["timeout"] = aiohttp.ClientTimeout(total=timeout, sock_connect=connect)
        try:
            if route is not None and route.engine is not None:  # a look at one engine: no routing
                engine = self._pinned(route.engine)
                headers = tracing.engine_headers(request, engine, method, path,
                                                 engine.request_headers(request_id, content_type))
                return await self._exchange(engine, method, path, body, headers, kwargs)
            engine = await self._first(route, request)
            tried: list[Engine] = []
            while True:
                current = engine
                current.counters.count_request(1)
                current.inflight += 1
                try:
                    headers = tracing.engine_headers(request, current, method, path, queueing.engine_headers(
                        request, current, current.request_headers(request_id, content_type)), self.router)
                    status, payload = await self._exchange(current, method, path, body, headers, kwargs)
                except EngineError as error:
                    current.inflight -= 1
                    following = self._next_after(current, error, route, tried, request)
                    if following is None:
                        raise
                    engine = following
                    continue
                except BaseException:
                    current.inflight -= 1
                    raise
                current.inflight -= 1
                if status == 503:
                    following = self._next_after(current, parse_error_body(status, payload), route, tried, request)
                    if following is not None:
                        engine = following
                        continue
                else:
                    current.succeeded()
                return status, payload
        finally:
            if request is not None:
                request.engine_wait += time.perf_counter() - started

    async def _exchange(self, engine: Engine, method: str, path: str, body: bytes | None,
                        headers: dict[str, str], kwargs: dict[str, Any]) -> tuple[int, bytes]:
        try:
            async with self.pool.request(method, engine.url(path), data=body, headers=headers, **kwargs) as response:
                return response.status, await response.read()
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise translate_client_error(exc) from exc

    async def open_stream(self, path: str, body: bytes, *, request: RequestContext | None = None,
                          request_id: str | None = None, route: RouteHints | None = None,
                          method: str = "POST") -> EngineStream:
        """Send ``body`` (POST, or ``method``) and return once the engine's response headers are in.

        The caller counts the wait as engine time (a stream's opener watches its client meanwhile)."""
        started = time.perf_counter()
        if request is not None:
            request_id = request.request_id
        engine = await self._first(route, request)
        tried: list[Engine] = []
        while True:
            engine.counters.count_request(1)
            engine.inflight += 1
            try:
                headers = tracing.engine_headers(request, engine, method, path, queueing.engine_headers(
                    request, engine, engine.request_headers(request_id)), self.router)
                response = await self.pool.request(method, engine.url(path), data=body, headers=headers)
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                engine.inflight -= 1
                error = translate_client_error(exc)
                following = self._next_after(engine, error, route, tried, request)
                if following is None:
                    raise error from exc
                engine = following
                continue
            except BaseException:
                engine.inflight -= 1
                raise
            if response.status == 503:  # the engine cannot serve now: another may
                try:
                    body_503 = await response.read()
                except (TimeoutError, aiohttp.ClientError, OSError):
                    body_503 = b""
                finally:
                    response.close()
                refusal = parse_error_body(503, body_503)
                following = self._next_after(engine, refusal, route, tried, request)
                if following is not None:
                    engine.inflight -= 1
                    engine = following
                    continue
                # No other engine: the client gets this engine's 503 (the stream reads as refused).
                return EngineStream(Refused(503, body_503), self.chunk_timeout, engine, self.fleet)
            # (Not "served" yet: its run of failures ends when the stream reaches its end, ``reach_end``.)
            first_bytes = tracing.on_first_bytes(request, self._first_token_timer(path, route, started))
            return EngineStream(response, self.chunk_timeout, engine, self.fleet, on_first_bytes=first_bytes)

    def _first_token_timer(self, path: str, route: RouteHints | None, started: float) -> Callable[[], None] | None:
        """What observes the stream's time to first token when its first bytes arrive (None: not measured)."""
        if self._metrics is None or path not in FIRST_TOKEN_PATHS:
            return None
        histogram = self._metrics.first_token_timer(route.model if route is not None else None)
        return lambda: histogram.observe(time.perf_counter() - started)

    async def post_json(self, path: str, payload: dict, *, request: RequestContext | None = None,
                        request_id: str | None = None, route: RouteHints | None = None) -> dict:
        """POST a JSON payload; the decoded JSON answer, or an EngineError.

        Without hints, they are read from the payload (an OpenAI-shaped body: its ``model``,
        ``user`` and prompt prefix), so callers that build requests themselves (the code API,
        features) are routed like the OpenAI routes.
        """
        if route is None:
            model = payload.get("model")
            route = openai_hints(payload, model=model if isinstance(model, str) else None,
                                 with_prefix=self.router.uses_prefix)
        tracing.own_call_started(request, path, payload)
        status, body = await self.request_bytes("POST", path, orjson.dumps(payload), request=request,
                                                request_id=request_id, route=route)
        tracing.own_call_answered(request, path, payload.get("model"), status, body,
                                  self._metrics.genai if self._metrics is not None else None)
        return self._decode(status, body)

    async def get_json(self, path: str, *, timeout: float | None = None, route: RouteHints | None = None,
                       request: RequestContext | None = None) -> dict:
        """GET a JSON answer. ``/v1/models`` without hints lists the union of the fleet's models."""
        if path == MODELS_PATH and route is None and self.fleet.many:
            return await self._fleet_models(timeout)
        status, body = await self.request_bytes("GET", path, timeout=timeout, route=route, request=request)
        tracing.own_call_answered(request, path, None, status, body, None)
        return self._decode(status, body)

    async def _fleet_models(self, timeout: float | None) -> dict:
        """Every ready engine's model cards, each name once (the first engine's card wins).

        An engine that does not answer now contributes the cards its last look read (a model only it
        serves keeps its own card: not another model's context length, not listed as an alias), and
        one whose last look already went unanswered is not asked (a hung engine would hold every
        listing for ``timeout``)."""
        engines = [engine for engine in self.fleet.engines if engine.ready] or list(self.fleet.engines)
        if not engines:
            raise self.router.unavailable(None)

        async def listing(engine: Engine) -> dict:
            if engine.timeouts_in_a_row and engine.cards:
                return {"data": engine.cards}
            try:
                return await self.get_json(MODELS_PATH, timeout=timeout, route=RouteHints(engine=engine.id))
            except EngineError:
                if engine.cards:
                    return {"data": engine.cards}
                raise

        answers = await asyncio.gather(*(listing(engine) for engine in engines), return_exceptions=True)
        cards: list[dict] = []
        seen: set[object] = set()
        failures: list[EngineError] = []
        for answer in answers:
            if isinstance(answer, EngineError):
                failures.append(answer)
                continue
            if isinstance(answer, BaseException):
                raise answer
            for card in answer.get("data", []):
                if isinstance(card, dict) and card.get("id") not in seen:
                    seen.add(card.get("id"))
                    cards.append(card)
        if not cards and failures:
            raise failures[0]
        return {"object": "list", "data": cards}

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
