"""Notice a client going away while the gateway waits on the engine.

After the request body is read, an ASGI server's ``receive()`` only returns
when the client disconnects (or the response is complete). One small task per
request waits on it and calls back at once, so the gateway can close its
upstream request and vLLM aborts the generation instead of finishing it for
nobody. The same task ticks every ``tick_seconds`` for streams that want to
send keep-alive comments during long silences.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from starlette.types import Receive


class DisconnectWatcher:
    def __init__(
        self,
        receive: Receive,
        on_disconnect: Callable[[], None],
        *,
        tick_seconds: float | None = None,
        on_tick: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._receive = receive
        self.on_disconnect = on_disconnect  # may be replaced while watching
        self._tick_seconds = tick_seconds
        self._on_tick = on_tick
        self._task: asyncio.Task | None = None
        self.disconnected = False

    def start(self) -> "DisconnectWatcher":
        self._task = asyncio.get_running_loop().create_task(self._watch())
        return self

    def stop(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._task = None

    async def _watch(self) -> None:
        while True:
            if self._tick_seconds is None:
                message = await self._receive()
            else:
                try:
                    message = await asyncio.wait_for(self._receive(), self._tick_seconds)
                except TimeoutError:
                    if self._on_tick is not None:
                        with contextlib.suppress(Exception):
                            await self._on_tick()
                    continue
            if message["type"] == "http.disconnect":
                self.disconnected = True
                self.on_disconnect()
                return
