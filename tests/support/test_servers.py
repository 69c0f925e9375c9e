"""run_uvicorn serves an app for real: responses stream unbuffered and disconnects reach the app."""

from __future__ import annotations

import asyncio
import socket
import threading

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from tests.support.servers import free_port, run_uvicorn, serve_uvicorn


def streaming_app(first_chunk_seen: threading.Event, disconnected: threading.Event) -> Starlette:
    async def events(request: Request) -> StreamingResponse:
        async def body():
            yield b"data: first\n\n"
            # The second event is only sent once the client has read the first one:
            # a buffering server would deadlock here and the test would time out.
            await asyncio.to_thread(first_chunk_seen.wait, 10)
            yield b"data: second\n\n"
            try:
                while not await request.is_disconnected():  # bounded: the server stops it when the test ends
                    yield b": keep-alive\n\n"
                    await asyncio.sleep(0.05)
            finally:  # Starlette cancels the body when the client goes away
                disconnected.set()

        return StreamingResponse(body(), media_type="text/event-stream")

    return Starlette(routes=[Route("/events", events)])


def test_stream_arrives_chunk_by_chunk_and_disconnect_reaches_the_app() -> None:
    first_chunk_seen, disconnected = threading.Event(), threading.Event()
    with run_uvicorn(streaming_app(first_chunk_seen, disconnected)) as base_url:
        with httpx.stream("GET", f"{base_url}/events", timeout=10) as response:
            lines = response.iter_lines()
            assert next(lines) == "data: first"
            first_chunk_seen.set()
            assert next(line for line in lines if line) == "data: second"
        assert disconnected.wait(10), "the app never saw the client go away"
    port = int(base_url.rsplit(":", 1)[1])
    with socket.socket() as probe:  # shut down: the port is free again
        probe.bind(("127.0.0.1", port))


async def test_async_variant_serves_from_an_async_test() -> None:
    first_chunk_seen, disconnected = threading.Event(), threading.Event()
    first_chunk_seen.set()
    async with serve_uvicorn(streaming_app(first_chunk_seen, disconnected)) as base_url:
        async with httpx.AsyncClient(timeout=10) as client:
            async with client.stream("GET", f"{base_url}/events") as response:
                assert response.status_code == 200
                assert response.headers["content-type"].startswith("text/event-stream")


def test_free_port_is_bindable() -> None:
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
