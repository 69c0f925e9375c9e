"""bench/nginx.py: Debian's nginx as the benchmark's compiled-relay reference, run for real.

nginx comes from scripts/install_nginx.sh (scripts/test.sh runs it). Each test starts its own
nginx on a free port in front of an upstream in this process, and checks what would make it
an unfair reference if it broke: answers relayed unchanged, stream pieces passed on as they
come, upstream connections kept alive, one worker whose CPU time is counted as nginx's.
"""

from __future__ import annotations

import asyncio

import aiohttp
import orjson
import pytest

import bench.fake_upstream
import bench.nginx
from bench.fake_upstream import FakeEngineConfig, serve
from bench.loadgen import Scenario, run_load
from bench.nginx import NginxMissing, nginx_binary, render_config, start_nginx
from bench.procs import stop_server

DEADLINE = 20.0  # seconds any single wait may take before the test fails instead of hanging
BODY = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}


class CountingProtocol(bench.fake_upstream.FakeUpstreamProtocol):
    """The fake upstream, counting the connections made to it."""

    opened = 0

    def connection_made(self, transport) -> None:
        CountingProtocol.opened += 1
        super().connection_made(transport)


@pytest.fixture
async def upstream_url(monkeypatch):
    CountingProtocol.opened = 0
    monkeypatch.setattr(bench.fake_upstream, "FakeUpstreamProtocol", CountingProtocol)
    server = await serve(host="127.0.0.1", port=0, config=FakeEngineConfig(model="fake-model"))
    yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    server.close()
    await server.wait_closed()


@pytest.fixture
async def nginx(upstream_url, tmp_path):
    server = await start_nginx(upstream_url=upstream_url, log_dir=tmp_path, cores=None)
    yield server
    await stop_server(server)


async def _post(url: str, body: dict) -> tuple[int, str, bytes]:
    timeout = aiohttp.ClientTimeout(total=DEADLINE)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        async with session.post(url + "/v1/chat/completions", json=body) as response:
            return response.status, response.headers.get("content-type", ""), await response.read()


async def test_non_streamed_answers_and_errors_come_back_unchanged(nginx, upstream_url):
    status, content_type, relayed = await _post(nginx.base_url, BODY)
    _, _, direct = await _post(upstream_url, BODY)
    assert (status, content_type) == (200, "application/json")
    relayed, direct = orjson.loads(relayed), orjson.loads(direct)
    for answer in (relayed, direct):  # ids and times differ per request; the rest may not
        answer.pop("id"), answer.pop("created")
    assert relayed == direct
    assert relayed["choices"][0]["message"]["content"] == " the quick brown fox jumps"

    status, _, error = await _post(nginx.base_url, {**BODY, "model": "no-such-model"})
    assert status == 404 and b"no-such-model" in error


async def test_streams_arrive_whole_through_nginx(nginx):
    scenario = Scenario(stream=True, max_tokens=64, concurrency=4)
    result = await run_load(base_url=nginx.base_url, model="fake-model", scenario=scenario,
                            duration=0.3, warmup=0)
    assert result.errors == 0, result.error_kinds
    assert result.requests > 0
    assert result.chunks_per_stream_min == result.chunks_per_stream_max == 64


async def test_upstream_connections_are_kept_alive(nginx):
    """Without upstream keep-alive every request would open a connection: 200 here."""
    scenario = Scenario(stream=False, max_tokens=4, concurrency=4)
    sent = 0
    while sent < 200:
        result = await run_load(base_url=nginx.base_url, model="fake-model", scenario=scenario,
                                duration=0.2, warmup=0)
        assert result.errors == 0, result.error_kinds
        sent += result.requests
    assert 1 <= CountingProtocol.opened <= 8


async def test_a_stream_piece_is_passed_on_before_the_next_is_written(tmp_path):
    """The upstream writes its second piece only after the client has read the first through
    nginx: a relay that held a piece back until more came would never let the stream go on.
    (nginx 1.22 passes pieces on here with ``proxy_buffering on`` too; ``off`` is what the
    issue names, and it also keeps a slow client's stream out of nginx's buffers and files.)"""
    first_read = asyncio.Event()

    async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (await reader.readline()) not in (b"\r\n", b""):
            pass  # the request line and headers; the body is small and ignored
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                     b"transfer-encoding: chunked\r\n\r\n")
        for frame in (b'data: {"piece": 1}\n\n', None, b'data: {"piece": 2}\n\ndata: [DONE]\n\n'):
            if frame is None:
                await asyncio.wait_for(first_read.wait(), DEADLINE)
                continue
            writer.write(b"%x\r\n%s\r\n" % (len(frame), frame))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(upstream, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    relay = await start_nginx(upstream_url=f"http://127.0.0.1:{port}", log_dir=tmp_path, cores=None)
    try:
        timeout = aiohttp.ClientTimeout(total=DEADLINE)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            async with session.post(relay.base_url + "/v1/chat/completions", json=BODY) as response:
                first = await asyncio.wait_for(response.content.readuntil(b"\n\n"), DEADLINE)
                first_read.set()
                rest = await response.read()
        assert first == b'data: {"piece": 1}\n\n'
        assert rest == b'data: {"piece": 2}\n\ndata: [DONE]\n\n'
    finally:
        await stop_server(relay)
        server.close()
        await server.wait_closed()


async def test_one_worker_does_the_work_and_its_cpu_counts_as_nginx(nginx):
    master = nginx.stats()
    (worker,) = master.children()
    own_before, counted_before = sum(master.cpu_times()[:2]), await nginx.cpu_seconds()
    scenario = Scenario(stream=True, max_tokens=256, concurrency=8)
    result = await run_load(base_url=nginx.base_url, model="fake-model", scenario=scenario,
                            duration=0.5, warmup=0)
    assert result.errors == 0 and result.requests > 0
    own_used = sum(master.cpu_times()[:2]) - own_before
    counted_used = await nginx.cpu_seconds() - counted_before
    assert counted_used > own_used  # the worker's time is in the figure, not only the master's
    assert worker.is_running() and master.children() == [worker]


def test_the_configuration_asks_for_what_makes_a_fair_reference(tmp_path):
    config = render_config(upstream_url="http://127.0.0.1:9001", port=9002, prefix=tmp_path)
    for line in ("worker_processes 1;", "proxy_buffering off;", "proxy_http_version 1.1;",
                 'proxy_set_header Connection "";', "server 127.0.0.1:9001;",
                 "listen 127.0.0.1:9002", "access_log off;"):
        assert line in config
    assert "keepalive 1024;" in config.split("upstream engine")[1].split("}")[0]
    assert "master_process on;" in config
    single = render_config(upstream_url="http://127.0.0.1:9001", port=9002, prefix=tmp_path, single_process=True)
    assert "master_process off;" in single  # for valgrind (bench.instructions): the one process serves
    with pytest.raises(ValueError, match="http://host:port"):
        render_config(upstream_url="https://example.invalid", port=1, prefix=tmp_path)


def test_a_missing_nginx_names_the_install_script(monkeypatch):
    monkeypatch.setattr(bench.nginx, "NGINX", "/nonexistent/nginx")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(NginxMissing, match="scripts/install_nginx.sh"):
        nginx_binary()
