"""Every call to a store bounded in time: a store that stops answering is a store that is down.

A partitioned or locked database does not fail, it hangs: without a bound, a named session's
claim, a resume, a cancel or a Responses lookup waits forever, and the writer's backlog (what
the manager refuses new streams on) never grows, because no write ever fails. So each call of
the session store and of the stored responses runs under ``SESSION_STORE_TIMEOUT_SECONDS``; past
it the call raises :class:`StoreTimeout` and its caller degrades as for a stopped store (a 503
with ``Retry-After``, the writer keeps the events and retries). The stores also give the same
bound to their driver (asyncpg's connect, acquire and command timeouts), so a connection caught
mid-query is given back or dropped within about the same time again.

``open`` and ``close`` are not bounded here: opening waits for the database at start (the
driver's connect timeout bounds each attempt), closing has bounds of its own.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

UNBOUNDED = frozenset({"open", "close"})


class StoreTimeout(Exception):
    """A store call that did not finish within its bound."""


class Bounded:
    """``target`` with each of its coroutine methods bounded to ``seconds``; attributes pass through.

    ``failure(name, exc)`` turns what a call raised (``StoreTimeout`` included) into what its
    callers expect; by default the exception itself.
    """

    def __init__(self, target: Any, seconds: float,
                 failure: Callable[[str, Exception], Exception] | None = None) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_seconds", seconds)
        object.__setattr__(self, "_failure", failure)

    @property
    def target(self) -> Any:
        return self._target

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if name in UNBOUNDED or name.startswith("_") or not asyncio.iscoroutinefunction(value):
            return value
        return self._bound(name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._target, name, value)  # (e.g. the manager's on_cancel_request; a test's stand-in method)

    def _bound(self, name: str, method: Callable) -> Callable:
        seconds, failure = self._seconds, self._failure

        @functools.wraps(method)
        async def call(*args, **kwargs):
            try:
                async with asyncio.timeout(seconds):
                    return await method(*args, **kwargs)
            except TimeoutError as exc:
                error = StoreTimeout(f"the store did not answer {name} within {seconds:g} s")
                error.__cause__ = exc
                if failure is None:
                    raise error from exc
                raise failure(name, error) from exc
            except Exception as exc:
                if failure is None:
                    raise
                raise failure(name, exc) from exc

        return call
