"""Served requests leave no reference cycles: what a request held is freed when it ends.

A cycle among a request's objects (its channel and disconnect watcher, which held the
request's task and callbacks; the server's send kept in the scope it owns) outlives the request until a full
garbage collection, which then walks every live object of the process: at 256 concurrent
streams such collections took ~70 ms each and delayed every stream's first token. With
the collector off and every unreachable object kept (``DEBUG_SAVEALL``), nothing of a
request may be found among the garbage after the server stopped.
"""

from __future__ import annotations

import gc
from collections import Counter

import httpx
import pytest

from gateway.app import create_app
from tests.support.bodies import CHAT, chat_body
from tests.support.servers import serve_uvicorn

# The objects each request creates that a cycle would keep (uvicorn's own per-request object
# included: the request's context keeps the server's send, a method of it, and sits in the scope).
REQUEST_OBJECTS = {
    "gateway.relay.channel.ClientChannel",
    "gateway.http.disconnect.DisconnectWatcher",
    "gateway.sessions.generation.Generation",
    "gateway.sessions.sink.LogSink",
    "gateway.sessions.log.EventLog",
    "gateway.relay.run.Run",
    "gateway.relay.plain.LiveRun",
    "gateway.relay.plain.ClientSink",
    "gateway.http.context.RequestContext",
    "uvicorn.protocols.http.httptools_impl.RequestResponseCycle",
}


def _name(obj: object) -> str:
    kind = type(obj)
    return f"{kind.__module__}.{kind.__qualname__}"


@pytest.mark.parametrize("session_store", ["off", "memory"])
async def test_streamed_and_plain_requests_leave_no_cycles(make_settings, fake_engine, session_store):
    # (no finished generation kept for resumes: each is dropped when it ends, and must be freed)
    app = create_app(make_settings(session_store=session_store, session_memory_max_finished=0))
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        async with serve_uvicorn(app) as url, httpx.AsyncClient(timeout=10) as client:
            for _ in range(3):
                async with client.stream("POST", url + CHAT, json=chat_body(stream=True, max_tokens=4)) as response:
                    lines = [line async for line in response.aiter_lines() if line]
                assert response.status_code == 200
                assert lines[-1] == "data: [DONE]"
                plain = await client.post(url + CHAT, json=chat_body(max_tokens=4))
                assert plain.status_code == 200
        # The server has stopped: every request's task ended.
        gc.collect()
        left = Counter(name for name in map(_name, gc.garbage) if name in REQUEST_OBJECTS)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert left == Counter()
