"""Open an engine stream while watching the client, so a client that leaves first costs nothing.

Until the engine's response headers arrive nothing has been sent to the client: an engine
that refuses or cannot be reached is still an HTTP error with its own status (raised as a
``GatewayError``), and a client that leaves meanwhile closes the engine request at once
(vLLM aborts it). The client's channel does the watching, and goes on watching once the
stream runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from gateway.engines.stream import EngineStream
from gateway.http.timing import EngineWait
from gateway.relay.channel import ClientChannel


async def open_watching(open_stream: Callable[[], Awaitable[EngineStream]], channel: ClientChannel,
                        scope: dict, *, abort_if_client_leaves: bool = True) -> EngineStream | None:
    """The engine's stream once its headers are in, or None if the client left first.

    Raises the engine's refusal (``EngineHTTPError``) or failure (``EngineError``). The wait
    counts as engine time of the request (``X-Gateway-Added-Ms`` excludes it). With
    ``abort_if_client_leaves=False`` (a generation that outlives its client) a client that
    leaves is only noticed (``channel.gone``): the stream opens whatever it does.
    """
    task = asyncio.current_task()
    if abort_if_client_leaves:
        channel.on_leave(task.cancel)
    else:
        channel.on_leave(lambda: None)
    try:
        with EngineWait(scope):
            stream = await open_stream()
    except asyncio.CancelledError:
        if abort_if_client_leaves and channel.gone and task.uncancel() == 0:
            return None  # the client left: the engine request is closed, vLLM aborts
        raise
    channel.ignore_leaving()
    if abort_if_client_leaves and channel.gone:  # it left just as the engine answered: take back its cancel
        while task.cancelling():
            task.uncancel()
        stream.close()
        return None
    if stream.status >= 400:
        raise await stream.refusal()
    return stream
