"""The plain relay: a run whose sink is its client, and the stream backend without sessions.

The engine's events go to the client as they arrive, one body per engine read, never
buffered. A client that leaves stops the run (vLLM aborts the generation). Errors after the
stream started become the dialect's in-band ending, never a silently truncated stream; so
does a gateway that stops (``LiveRuns.end_all``, from the drain), before the server cuts the
connection. Nothing is kept: no ids, no resume, no continuation on another engine.
"""

from __future__ import annotations

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gateway.failures import Failure
from gateway.http.context import RequestContext
from gateway.relay.call import Relay, StreamCall
from gateway.relay.channel import ClientChannel
from gateway.relay.ending import Ending
from gateway.relay.pump import joined
from gateway.relay.run import Run


class ClientSink:
    """Each read's events straight to the client, as one body."""

    __slots__ = ("channel", "write")
    counts_events = False
    first_event = None

    def __init__(self) -> None:
        self.channel: ClientChannel | None = None

    def attach(self, channel: ClientChannel) -> list[tuple[bytes, bytes]]:
        self.channel = channel
        self.write = channel.write  # the pump calls the channel itself: no call in between per read
        return []

    def detach(self) -> None:
        return None  # (the channel knows its client is gone and writes nothing more)

    async def finish(self, ending: Ending) -> int:
        if self.channel is not None:
            await self.channel.close(joined(ending.events))
        return 0

    async def refused(self, error: Failure) -> None:
        return None

    async def delivered(self) -> list[bytes] | None:
        return None


class RunResponse(Response):
    """A run served to the client of the request it runs for, as an ASGI response (raw routes call it,
    FastAPI routes return it: ``send`` and ``receive`` are then those of FastAPI's stack)."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.status_code = 200
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        run = self.run
        await run.serve(ClientChannel.of(run.request, keepalive_seconds=run.relay.keepalive_seconds, send=send,
                                         receive=receive))


class PlainRelay:
    """The stream backend when resumable sessions are off: every stream is a plain relay."""

    resumable = False

    def __init__(self, relay: Relay) -> None:
        self.relay = relay

    async def stream(self, call: StreamCall, request: RequestContext) -> Response:
        return plain_stream(call, request, self.relay)


def plain_stream(call: StreamCall, request: RequestContext, relay: Relay) -> Response:
    """``call`` relayed straight to ``request``'s client."""
    return RunResponse(LiveRun(call, request, relay, ClientSink()))


class LiveRun(Run):
    """A plain run, known to the drain while it streams."""

    __slots__ = ()

    async def run(self) -> None:
        live = self.relay.live
        live.add(self)
        try:
            await super().run()
        finally:
            live.discard(self)
