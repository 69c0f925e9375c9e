"""Waiting for an outcome instead of sleeping: poll a condition until it holds, or fail."""

from __future__ import annotations

import asyncio


async def until(condition, timeout: float = 20.0) -> None:
    """Return once ``condition()`` is true; fail the test if it is still false after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)
