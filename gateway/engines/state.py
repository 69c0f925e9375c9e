"""What the gateway knows about its engines: ready or not, which models, how long a context, how busy.

Per engine (``engines.engine``), readiness follows the engine's own signals: ``/health``
answers 200 and ``/v1/models`` lists at least one model. A background task looks at every
engine each ``ENGINE_POLL_INTERVAL`` seconds; ``/health`` looks again on demand when the
last look is older than a second, so a stopped engine reads not-ready at once, and
concurrent refreshes share one look. Another task reads each ready engine's ``/metrics``
every ``ENGINE_METRICS_INTERVAL`` seconds (its load, for routing); with DNS discovery a
third re-resolves the name (``engines.discovery``).

For the rest of the gateway this is one view of the whole fleet: ``ready`` when any engine
is, ``served_models`` the union of the ready engines' models (of every known engine when
none is ready), and the model naming rules (aliases, ``MODEL_PATH``, 404 for an unknown
model, 503 for a known model whose engines are all down).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from gateway.config import Settings
from gateway.engines.discovery import DnsDiscovery
from gateway.engines.engine import Engine
from gateway.engines.errors import BadGateway, EngineError, EngineTimeout, EngineUnavailable
from gateway.engines.fleet import Fleet
from gateway.engines.routing import RouteHints
from gateway.engines.scrape import parse_load
from gateway.failures import NotFound, Unavailable

log = logging.getLogger("gateway.engine")

FRESH_SECONDS = 1.0
# A busy engine can be slow to answer /health (or drop a connection); only this
# many such failures in a row make a ready engine read not-ready. A refused
# connection or a non-200 health answer does at once.
TIMEOUTS_BEFORE_NOT_READY = 3
LOOK_TIMEOUT = 10.0
SCRAPE_TIMEOUT = 2.0
# When no engine can take a request, it waits this long at most for a fresh look.
LOOK_AGAIN_SECONDS = 1.0


class EngineState:
    def __init__(self, settings: Settings, upstream, *, metrics=None, fleet: Fleet | None = None,
                 discovery: DnsDiscovery | None = None) -> None:
        """``upstream``: how to reach engines (``EngineClient``; its ``route`` hints pin each look to
        one engine); ``fleet``: the engines (default: the upstream's, else from ``settings``)."""
        self._settings = settings
        self._upstream = upstream
        self._metrics = metrics
        if fleet is None:
            fleet = getattr(upstream, "fleet", None) or Fleet.from_settings(settings)
        self.fleet = fleet
        self.discovery = discovery
        # The fleet as one engine (recomputed after every look).
        self.ready = False
        self.reachable = False
        self.served_models: list[str] = []
        self.max_model_len: int | None = None
        self.root: str | None = None  # the checkpoint the default model's engine loaded (path or hub id)
        self.last_error: str | None = None
        self.checked_at = 0.0
        self._refreshing: asyncio.Task | None = None
        # Done once the current look settled readiness: an engine it looked at is ready, or it ended.
        self._settled: asyncio.Future | None = None
        self._tasks: list[asyncio.Task] = []
        self._listeners: list[Callable[[], None]] = []

    def on_change(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` after every look at the engines and every read of their loads.

        Flow control (``gateway.flow``) dispatches waiting requests then: an engine back, or
        load gone elsewhere, frees slots no release of this gateway's announces.
        """
        self._listeners.append(listener)

    def _changed(self) -> None:
        for listener in self._listeners:
            try:
                listener()
            except Exception:  # one listener's failure must not stop the polling
                log.exception("an engine-state listener failed")

    @property
    def engines(self) -> list[Engine]:
        return self.fleet.engines

    # --- model names -----------------------------------------------------------
    @property
    def default_model(self) -> str:
        """The name the gateway sends upstream for aliases and reports as ``model``."""
        if self._settings.model_path and (
            not self.served_models or self._settings.model_path in self.served_models
        ):
            return self._settings.model_path
        if self.served_models:
            return self.served_models[0]
        return self._settings.model_path or "unknown"

    @property
    def reported_model(self) -> str:
        """The name shown as ``model``/``model_path``: MODEL_PATH when set, else the served name."""
        return self._settings.model_path or self.default_model

    @property
    def public_models(self) -> list[str]:
        """Every name a client may use: the engines' own plus configured aliases."""
        names = list(self.served_models)
        for name in [self._settings.model_path, *self._settings.model_aliases]:
            if name and name not in names:
                names.append(name)
        return names

    def resolve_model(self, requested: object) -> str | None:
        """The engine-side name for ``requested``; None if the engines serve it as is.

        Raises ``NotFound`` (OpenAI's ``model_not_found``) listing valid names for an unknown
        model, and ``Unavailable`` when no model is known yet or every engine serving it is down.
        """
        if not self.served_models:
            raise Unavailable("the inference engine is not ready (no model loaded yet)", code="engine_not_ready")
        if requested is None or requested in self.served_models:
            return None
        if requested in self.public_models:
            return self.default_model
        if isinstance(requested, str) and any(requested in engine.models for engine in self.fleet.engines):
            raise Unavailable(f"every inference engine serving '{requested}' is down", code="engine_unavailable")
        names = self.public_models  # and the models of engines that are down (a request for one is a 503)
        names += [name for engine in self.fleet.engines for name in engine.models if name not in names]
        valid = ", ".join(dict.fromkeys(names))
        raise NotFound(f"The model '{requested}' does not exist. Available models: {valid}", param="model",
                       code="model_not_found")

    @property
    def continues_streams(self) -> bool:
        """Whether a resumable stream whose engine fails is continued on another (``STREAM_CONTINUATION``)."""
        return self._settings.stream_continuation

    @property
    def wants_prefix(self) -> bool:
        """Whether routing reads the prompt's prefix (protocols compute it only then)."""
        router = getattr(self._upstream, "router", None)
        return bool(router is not None and router.uses_prefix)

    # --- the fleet as one -------------------------------------------------------------
    def _aggregate(self) -> None:
        engines = self.fleet.engines
        ready = [engine for engine in engines if engine.ready]
        names: list[str] = []
        for engine in ready or engines:
            for name in engine.models:
                if name not in names:
                    names.append(name)
        self.served_models = names
        self.ready = bool(ready)
        self.reachable = any(engine.reachable for engine in engines)
        home = next((e for e in ready if self.default_model in e.models), None) or next(
            (e for e in engines if self.default_model in e.models), None)
        if home is not None:
            self.max_model_len, self.root = home.max_model_len, home.root
        if self.ready:
            self.last_error = None
        elif engines:
            self.last_error = next((e.last_error for e in engines if e.last_error), None)
        else:
            self.last_error = (self.discovery.last_error if self.discovery is not None else None) or \
                "no inference engine is known yet"
        if self._metrics is not None:
            self._metrics.engine_ready.set(1 if self.ready else 0)

    # --- refreshing --------------------------------------------------------------
    async def refresh(self) -> None:
        """Look at every engine now (one look shared by concurrent callers)."""
        await asyncio.shield(self._shared_look())

    async def refresh_if_stale(self, *, max_wait: float = 2.0) -> None:
        """Refresh a look older than a second, waiting at most ``max_wait`` for it to settle readiness.

        Health endpoints use this: they answer from what is known when the
        engine is slow to answer, while the look goes on in the background.
        The wait ends as soon as one engine's fresh look says it is ready (the fleet is
        ready then, whatever the others answer): a hung engine, whose look takes
        ``LOOK_TIMEOUT``, does not make every readiness probe wait ``max_wait`` while
        another engine serves (Kubernetes gives a probe one second by default).
        """
        if time.monotonic() - self.checked_at > FRESH_SECONDS:
            self._shared_look()
            await asyncio.wait({self._settled}, timeout=max_wait)

    async def look_again(self) -> None:
        """No engine can take a request: a fresh look (if the last is stale), briefly awaited."""
        await self.refresh_if_stale(max_wait=LOOK_AGAIN_SECONDS)

    def _shared_look(self) -> asyncio.Task:
        if self._refreshing is None or self._refreshing.done():
            loop = asyncio.get_running_loop()
            self._settled = loop.create_future()
            self._refreshing = loop.create_task(self._look_all(self._settled))
        return self._refreshing

    async def _look_all(self, settled: asyncio.Future) -> None:
        try:
            if self.discovery is not None and not self.fleet.engines:  # the first look of a discovered fleet
                members = await self.discovery.members()
                if members is not None:
                    self.fleet.replace(members)
            await asyncio.gather(*(self._look_settling(engine, settled) for engine in list(self.fleet.engines)))
        finally:
            self.checked_at = time.monotonic()
            self._aggregate()
            if not settled.done():
                settled.set_result(None)
            self._changed()

    async def _look_settling(self, engine: Engine, settled: asyncio.Future) -> None:
        """Look at ``engine``; the first engine found ready settles the fleet's readiness at once."""
        await self._look(engine)
        if engine.ready and not settled.done():
            self._aggregate()
            settled.set_result(None)

    async def _look(self, engine: Engine) -> None:
        pinned = RouteHints(engine=engine.id)
        try:
            status, _ = await self._upstream.request_bytes("GET", "/health", timeout=LOOK_TIMEOUT, route=pinned)
            engine.reachable = True
            if status != 200:
                raise EngineUnavailable(f"engine /health answered {status}", kind=f"health_{status}")
            models = await self._upstream.get_json("/v1/models", timeout=LOOK_TIMEOUT, route=pinned)
            cards = [m for m in models.get("data", []) if isinstance(m, dict) and m.get("id")]
            engine.cards = cards
            engine.models = [str(m["id"]) for m in cards]
            if cards:
                engine.max_model_len = cards[0].get("max_model_len")
                engine.root = cards[0].get("root")
            was_ready, engine.ready = engine.ready, bool(engine.models)
            engine.timeouts_in_a_row = 0
            if engine.ready:
                if not engine.ejected:
                    engine.last_error = engine.error_kind = None
            else:
                engine.last_error, engine.error_kind = "the engine lists no model", "no_model"
            if engine.ready and not was_ready:
                log.info("engine ready", extra={"engine": engine.id, "models": engine.models,
                                                "max_model_len": engine.max_model_len})
        except EngineError as exc:
            if isinstance(exc, (EngineTimeout, BadGateway)) and engine.ready:
                engine.timeouts_in_a_row += 1
                if engine.timeouts_in_a_row < TIMEOUTS_BEFORE_NOT_READY:
                    # Still ready (it may only be busy), but rested as a failed request rests it: new
                    # requests go to the other engines meanwhile (to this one only if none is routable),
                    # instead of waiting on a hung engine until its third look takes it out.
                    self.fleet.failed(engine, exc.kind, f"its look went unanswered: {exc.message}")
                    return
            if isinstance(exc, EngineUnavailable):
                engine.reachable = False
            if engine.ready or not engine.checked_at:  # (its first look too: an engine down from the start)
                log.warning("engine not ready", extra={"engine": engine.id, "reason": exc.message})
            engine.ready = False
            engine.last_error = exc.message
            engine.error_kind = exc.kind
        finally:
            engine.checked_at = time.monotonic()

    async def _scrape(self, engine: Engine) -> None:
        """Read ``engine``'s load from its /metrics (no load known when that fails)."""
        try:
            status, body = await self._upstream.request_bytes("GET", "/metrics", timeout=SCRAPE_TIMEOUT,
                                                              route=RouteHints(engine=engine.id))
        except EngineError as exc:
            engine.scraped(None)
            if isinstance(exc, EngineUnavailable):  # it may be gone: look now, not at the next poll
                self._shared_look()
            return
        engine.scraped(parse_load(body) if status == 200 else None)

    async def scrape_all(self) -> None:
        await asyncio.gather(*(self._scrape(engine) for engine in list(self.fleet.engines) if engine.ready))
        self._changed()

    async def discover(self) -> None:
        """Resolve the engines' DNS name now, and look at the engines that are new."""
        if self.discovery is None:
            return
        members = await self.discovery.members()
        if members is None:
            self._aggregate()
            return
        added = self.fleet.replace(members)
        if added:
            await asyncio.gather(*(self._look(engine) for engine in added))
        self._aggregate()

    # --- background work ----------------------------------------------------------
    async def _every(self, seconds: float, work: Callable[[], Awaitable[None]]) -> None:
        while True:
            with contextlib.suppress(Exception):
                await work()
            await asyncio.sleep(seconds)

    def start_polling(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._every(self._settings.engine_poll_interval, self.refresh),
                                            name="engine-poller"))
        if self._settings.engine_metrics_interval > 0:
            self._tasks.append(loop.create_task(self._every(self._settings.engine_metrics_interval, self.scrape_all),
                                                name="engine-metrics"))
        if self.discovery is not None:
            self._tasks.append(loop.create_task(self._every(self._settings.vllm_dns_refresh_seconds, self.discover),
                                                name="engine-discovery"))

    async def stop_polling(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._refreshing is not None and not self._refreshing.done():
            self._refreshing.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._refreshing
