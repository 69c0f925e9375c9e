"""Time spent waiting for the engine, per request, so ``X-Gateway-Added-Ms`` counts only the gateway.

The middleware puts 0.0 under :data:`ENGINE_WAIT` in the request's ASGI scope and points
:data:`serving_scope` at that scope. The engine client adds its own waiting to it, whichever
route called it; a stream's opener adds the wait for the engine's response headers itself.
"""

from __future__ import annotations

import time
from contextvars import ContextVar

ENGINE_WAIT = "gateway.engine_wait_seconds"
serving_scope: ContextVar[dict | None] = ContextVar("serving_scope", default=None)


def add_engine_wait(seconds: float, scope: dict | None = None) -> None:
    """Count ``seconds`` as engine time of the request being served (or of ``scope``)."""
    scope = scope if scope is not None else serving_scope.get()
    if scope is not None:
        scope[ENGINE_WAIT] = scope.get(ENGINE_WAIT, 0.0) + seconds


class EngineWait:
    """``with EngineWait(scope): ...`` counts the block's wall-clock time as engine time."""

    __slots__ = ("_scope", "_started")

    def __init__(self, scope: dict | None = None) -> None:
        self._scope = scope

    def __enter__(self) -> "EngineWait":
        self._started = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        add_engine_wait(time.perf_counter() - self._started, self._scope)
