"""``read_buffered``: the same bytes as aiohttp's ``readany``, one parser call per read instead of one per chunk."""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp
import pytest
from aiohttp import web
from aiohttp.client_proto import ResponseHandler

from gateway.engines.buffered_read import SUPPORTED, read_buffered, reader_of
from gateway.engines.stream import Refused
from tests.support.waiting import until

EVENT = b'data: {"choices":[{"delta":{"content":"tok"}}]}\n\n'


@contextlib.asynccontextmanager
async def server(handler):
    app = web.Application()
    app.router.add_get("/", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        await runner.cleanup()


def chunked(parts: list[bytes], *, then=None):
    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        for part in parts:
            await response.write(part)  # one HTTP chunk each, as vLLM sends one per event
        if then is not None:
            await then(request)
        await response.write_eof()
        return response
    return handler


async def read_all(read) -> list[bytes]:
    pieces = []
    while piece := await read():
        pieces.append(piece)
    return pieces


def counting_resumes(monkeypatch) -> list[int]:
    calls = [0]
    original = ResponseHandler.resume_reading

    def resume_reading(self, *args, **kwargs):
        calls[0] += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(ResponseHandler, "resume_reading", resume_reading)
    return calls


def test_the_installed_aiohttp_has_the_fields_it_reads():
    assert SUPPORTED


@pytest.mark.parametrize("parts", [
    [EVENT] * 300,
    [b"x" * 5000 for _ in range(400)],       # 2 MB: past the reader's high water, reading pauses and resumes
    [b"a", b"", b"bc", b"d" * 70_000, b"e"],  # odd sizes, an empty write, one chunk above the buffer limit
])
async def test_it_reads_exactly_the_bytes_readany_reads(parts):
    expected = b"".join(parts)
    async with server(chunked(parts)) as url, aiohttp.ClientSession() as session:
        async with session.get(url) as response:
            fast = b"".join(await read_all(reader_of(response.content)))
        async with session.get(url) as response:
            plain = b"".join(await read_all(response.content.readany))
    assert fast == plain == expected


async def test_a_body_with_a_length_not_chunks_reads_the_same():
    body = EVENT * 1000

    async def handler(request):
        return web.Response(body=body)

    async with server(handler) as url, aiohttp.ClientSession() as session:
        async with session.get(url) as response:
            assert b"".join(await read_all(reader_of(response.content))) == body


async def test_everything_buffered_comes_in_one_read_with_one_resume(monkeypatch):
    parts = [EVENT] * 200
    resumes = counting_resumes(monkeypatch)
    async with server(chunked(parts)) as url, aiohttp.ClientSession() as session:
        async with session.get(url) as response:
            await until(response.content.is_eof, what="the whole body buffered")
            before = resumes[0]
            first = await read_buffered(response.content)
            fast_resumes = resumes[0] - before
            assert await read_buffered(response.content) == b""
        async with session.get(url) as response:
            await until(response.content.is_eof, what="the whole body buffered")
            before = resumes[0]
            assert await response.content.readany() == b"".join(parts)
            readany_resumes = resumes[0] - before
    assert first == b"".join(parts)
    assert fast_resumes == 1
    assert readany_resumes == 200  # what it saves: readany re-runs the parser after every chunk


async def test_an_engine_that_dies_mid_body_fails_the_read_as_readany_does():
    async def drop(request):
        request.transport.close()  # no terminating chunk: the body is cut

    async with server(chunked([EVENT] * 3, then=drop)) as url, aiohttp.ClientSession() as session:
        for read_of in (reader_of, lambda content: content.readany):
            async with session.get(url) as response:
                read = read_of(response.content)
                with pytest.raises(aiohttp.ClientPayloadError):
                    await read_all(read)


async def test_a_read_timeout_fails_the_waiting_read():
    release = asyncio.Event()

    async def stall(request):
        await release.wait()

    async with server(chunked([EVENT], then=stall)) as url, \
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(sock_read=0.2)) as session:
        try:
            async with session.get(url) as response:
                read = reader_of(response.content)
                assert await read() == EVENT
                with pytest.raises(asyncio.TimeoutError):
                    await read()
        finally:
            release.set()


async def test_a_response_that_is_not_aiohttps_reader_keeps_its_own_read():
    refused = Refused(503, b'{"error": "busy"}')
    assert reader_of(refused.content) == refused.readany
    assert await reader_of(refused.content)() == b""
