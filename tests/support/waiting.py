"""Waiting for an outcome instead of sleeping: poll a condition until it holds, or fail."""

from __future__ import annotations

import asyncio
import inspect


async def until(condition, timeout: float = 20.0, *, what: str = "condition", interval: float = 0.01) -> float:
    """Return once ``condition()`` (a bool, or an awaitable of one) is true, with the seconds it took.

    Fails the test if it is still false after ``timeout`` seconds. Conditions that ask a server
    (an HTTP poll) should pass a longer ``interval`` than the default, which suits in-process state.
    """
    loop = asyncio.get_running_loop()
    started = loop.time()
    deadline = started + timeout
    while True:
        held = condition()
        if inspect.isawaitable(held):
            held = await held
        if held:
            return loop.time() - started
        assert loop.time() < deadline, f"{what} not met in {timeout:.0f}s"
        await asyncio.sleep(interval)
