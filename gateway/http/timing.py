"""Time spent waiting for the engine, per request, so ``X-Gateway-Added-Ms`` counts only the gateway.

The request's context (``http.context.RequestContext.engine_wait``) adds up what the engine
client waited for it, and what a stream's opener waited for the engine's response headers;
the middleware subtracts it when the response starts.
"""

from __future__ import annotations

import time

from gateway.http.context import RequestContext


class EngineWait:
    """``with EngineWait(request): ...`` counts the block's wall-clock time as ``request``'s engine time."""

    __slots__ = ("_request", "_started")

    def __init__(self, request: RequestContext | None) -> None:
        self._request = request

    def __enter__(self) -> EngineWait:
        self._started = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        if self._request is not None:
            self._request.engine_wait += time.perf_counter() - self._started
