"""What the gateway knows about the engine: ready or not, which models, how long a context.

Readiness follows the engine's own signals: ``/health`` answers 200 and
``/v1/models`` lists at least one model. A background task refreshes the state
every ``ENGINE_POLL_INTERVAL`` seconds; ``/health`` refreshes it on demand when
the last look is older than a second, so a stopped engine reads not-ready at
once, and concurrent refreshes share one look.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from gateway.config import Settings
from gateway.engines.client import EngineClient
from gateway.engines.errors import BadGateway, EngineError, EngineTimeout
from gateway.http.errors import GatewayError

log = logging.getLogger("gateway.engine")

FRESH_SECONDS = 1.0
# A busy engine can be slow to answer /health (or drop a connection); only this
# many such failures in a row make a ready engine read not-ready. A refused
# connection or a non-200 health answer does at once.
TIMEOUTS_BEFORE_NOT_READY = 3
LOOK_TIMEOUT = 10.0


class EngineState:
    def __init__(self, settings: Settings, upstream: EngineClient, *, metrics=None) -> None:
        self._settings = settings
        self._upstream = upstream
        self._metrics = metrics
        self.ready = False
        self.reachable = False
        self.served_models: list[str] = []
        self.max_model_len: int | None = None
        self.root: str | None = None  # the checkpoint the engine loaded (its path or hub id)
        self.last_error: str | None = None
        self.checked_at = 0.0
        self._timeouts_in_a_row = 0
        self._refreshing: asyncio.Task | None = None
        self._poller: asyncio.Task | None = None

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
        """Every name a client may use: the engine's own plus configured aliases."""
        names = list(self.served_models)
        for name in [self._settings.model_path, *self._settings.model_aliases]:
            if name and name not in names:
                names.append(name)
        return names

    def resolve_model(self, requested: object) -> str | None:
        """The engine-side name for ``requested``; None if the engine serves it as is.

        Raises a 404 (OpenAI's ``model_not_found``) listing valid names for an
        unknown model, and 503 when the engine's models are not known yet.
        """
        if not self.served_models:
            raise GatewayError(503, "the inference engine is not ready (no model loaded yet)", code="engine_not_ready")
        if requested is None or requested in self.served_models:
            return None
        if requested in self.public_models:
            return self.default_model
        valid = ", ".join(self.public_models)
        raise GatewayError(
            404,
            f"The model '{requested}' does not exist. Available models: {valid}",
            param="model",
            code="model_not_found",
        )

    # --- refreshing --------------------------------------------------------------
    async def refresh(self) -> None:
        """Look at the engine now (one look shared by concurrent callers)."""
        await asyncio.shield(self._shared_look())

    async def refresh_if_stale(self, *, max_wait: float = 2.0) -> None:
        """Refresh a look older than a second, waiting at most ``max_wait`` for it.

        Health endpoints use this: they answer from what is known when the
        engine is slow to answer, while the look goes on in the background.
        """
        if time.monotonic() - self.checked_at > FRESH_SECONDS:
            await asyncio.wait({self._shared_look()}, timeout=max_wait)

    def _shared_look(self) -> asyncio.Task:
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.get_running_loop().create_task(self._look())
        return self._refreshing

    async def _look(self) -> None:
        timeout = LOOK_TIMEOUT
        try:
            status, _ = await self._upstream.request_bytes("GET", "/health", timeout=timeout)
            self.reachable = True
            if status != 200:
                raise EngineError(503, f"engine /health answered {status}")
            models = await self._upstream.get_json("/v1/models", timeout=timeout)
            cards = [m for m in models.get("data", []) if isinstance(m, dict) and m.get("id")]
            self.served_models = [str(m["id"]) for m in cards]
            if cards:
                self.max_model_len = cards[0].get("max_model_len")
                self.root = cards[0].get("root")
            was_ready, self.ready = self.ready, bool(self.served_models)
            self._timeouts_in_a_row = 0
            self.last_error = None if self.ready else "the engine lists no model"
            if self.ready and not was_ready:
                log.info("engine ready", extra={"models": self.served_models, "max_model_len": self.max_model_len})
        except EngineError as exc:
            if isinstance(exc, (EngineTimeout, BadGateway)) and self.ready:
                self._timeouts_in_a_row += 1
                if self._timeouts_in_a_row < TIMEOUTS_BEFORE_NOT_READY:
                    self.last_error = exc.message
                    return
            if exc.status == 503 and "unreachable" in exc.message:
                self.reachable = False
            if self.ready:
                log.warning("engine not ready", extra={"reason": exc.message})
            self.ready = False
            self.last_error = exc.message
        finally:
            self.checked_at = time.monotonic()
            if self._metrics is not None:
                self._metrics.engine_ready.set(1 if self.ready else 0)

    async def _poll_forever(self) -> None:
        while True:
            with contextlib.suppress(Exception):
                await self.refresh()
            await asyncio.sleep(self._settings.engine_poll_interval)

    def start_polling(self) -> None:
        self._poller = asyncio.get_running_loop().create_task(self._poll_forever(), name="engine-poller")

    async def stop_polling(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
            self._poller = None
        if self._refreshing is not None and not self._refreshing.done():
            self._refreshing.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._refreshing
