"""Open an engine stream while watching the client, so a client that leaves first costs nothing.

Until the engine's response headers arrive nothing has been sent to the client: an engine
that refuses or cannot be reached is still an HTTP error with its own status (raised as a
``GatewayError``), and a client that leaves meanwhile closes the engine request at once
(vLLM aborts it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from starlette.types import Receive

from gateway.engines.client import EngineStream
from gateway.http.disconnect import DisconnectWatcher
from gateway.http.timing import EngineWait


async def open_watching(open_stream: Callable[[], Awaitable[EngineStream]], receive: Receive,
                        scope: dict, *, abort_if_client_leaves: bool = True) -> EngineStream | None:
    """The engine's stream once its headers are in, or None if the client left first.

    Raises the engine's refusal (``EngineHTTPError``) or failure (``EngineError``). The wait
    counts as engine time of the request (``X-Gateway-Added-Ms`` excludes it). With
    ``abort_if_client_leaves=False`` (a generation that outlives its client) nobody watches:
    the stream opens whatever the client does.
    """
    if not abort_if_client_leaves:
        with EngineWait(scope):
            stream = await open_stream()
        refusal = await stream.refusal()
        if refusal is not None:
            raise refusal
        return stream
    task = asyncio.current_task()
    watcher = DisconnectWatcher(receive, task.cancel).start()
    try:
        with EngineWait(scope):
            stream = await open_stream()
    except asyncio.CancelledError:
        if watcher.disconnected and task.uncancel() == 0:
            return None  # the client left: the engine request is closed, vLLM aborts
        raise
    finally:
        watcher.stop()
    if watcher.disconnected:  # it left just as the engine answered: take back its cancel request
        while task.cancelling():
            task.uncancel()
        stream.close()
        return None
    refusal = await stream.refusal()
    if refusal is not None:
        raise refusal
    return stream
