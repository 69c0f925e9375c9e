"""The gateway as its own process (``python -m gateway``) in front of the fake engine.

What only a real process shows: SIGTERM ending every open stream explicitly before the
connections close, the connection bound uvicorn enforces, and 500 concurrent streams with the
process's memory (VmRSS) afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import signal

import aiohttp
import httpx
import orjson

from tests.support.gateway_process import GatewayProcess
from tests.support.sse_client import read_stream
from tests.support.waiting import until


def chat(max_tokens: int, **extra) -> dict:
    return {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "stream": True,
            "max_tokens": max_tokens, **extra}


async def first_events_then_sigterm(gateway: GatewayProcess, body: dict) -> list[dict | str]:
    """Stream ``body``; after the first content event SIGTERM the gateway; every event the client got."""
    got: list[dict | str] = []
    async with httpx.AsyncClient(timeout=30) as client:
        async with client.stream("POST", gateway.base_url + "/v1/chat/completions", json=body) as response:
            assert response.status_code == 200
            stopping = None
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                got.append(data if data == "[DONE]" else orjson.loads(data))
                if stopping is None and len(got) >= 2:
                    stopping = asyncio.create_task(gateway.stop(signal.SIGTERM))
    # uvicorn re-raises the signal once it has shut down gracefully: death by SIGTERM, as supervisors expect.
    assert await stopping in (0, -signal.SIGTERM)
    return got


async def test_sigterm_ends_a_plain_stream_with_an_explicit_ending_before_exit(fake_engine, tmp_path):
    fake_engine.chunk_delay = 0.05
    gateway = await GatewayProcess(fake_engine, tmp_path / "gw.log", SESSION_STORE="off",
                                   GRACEFUL_SHUTDOWN_SECONDS="2").start()
    got = await first_events_then_sigterm(gateway, chat(10_000))
    assert got[-1] == "[DONE]"
    assert got[-2]["error"]["code"] == "gateway_shutdown"
    assert fake_engine.stream_aborted.is_set()


async def test_sigterm_ends_a_session_stream_with_an_explicit_ending_before_exit(fake_engine, tmp_path):
    fake_engine.chunk_delay = 0.05
    database = f"sqlite+aiosqlite:///{tmp_path}/gw.db"
    gateway = await GatewayProcess(fake_engine, tmp_path / "gw.log", SESSION_STORE="sqlite", DATABASE_URL=database,
                                   GRACEFUL_SHUTDOWN_SECONDS="2").start()
    got = await first_events_then_sigterm(gateway, chat(10_000, session_id="term-1"))
    assert got[-1] == "[DONE]" and got[-2]["error"]["code"] == "gateway_shutdown"
    restarted = await GatewayProcess(fake_engine, tmp_path / "gw2.log", SESSION_STORE="sqlite",
                                     DATABASE_URL=database).start()
    try:
        async with httpx.AsyncClient(timeout=30) as client:
            replay = await read_stream(client, "GET", restarted.base_url + "/v1/sessions/term-1/events")
    finally:
        await restarted.stop()
    assert [e.json if not e.done else "[DONE]" for e in replay.events] == got  # what it got is what was kept


async def test_sigterm_answers_a_call_the_engine_has_not_answered_by_the_grace_period_with_a_503(fake_engine, tmp_path):
    fake_engine.answer_hold = asyncio.Event()  # never set: the engine "generates" for ever
    gateway = await GatewayProcess(fake_engine, tmp_path / "gw.log", SESSION_STORE="off",
                                   GRACEFUL_SHUTDOWN_SECONDS="1").start()
    calls = {"/v1/chat/completions": {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}],
                                      "max_tokens": 8},
             "/v1/messages": {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}}
    async with httpx.AsyncClient(base_url=gateway.base_url, timeout=30) as client:
        asked = [asyncio.create_task(client.post(path, json=body)) for path, body in calls.items()]
        await until(lambda: len(fake_engine.received) == len(calls), what="both calls at the engine")
        assert await gateway.stop(signal.SIGTERM) in (0, -signal.SIGTERM)
        chat, messages = await asyncio.gather(*asked)
    # Not uvicorn's bare text/plain 500: each protocol's own 503, which clients retry.
    assert chat.status_code == 503 and chat.headers["retry-after"] == "1"
    assert chat.json()["error"]["code"] == "gateway_shutdown"
    assert messages.status_code == 503 and messages.json()["type"] == "error"
    assert "shut down" in messages.json()["error"]["message"]
    assert "Exception in ASGI application" not in (tmp_path / "gw.log").read_text()


async def test_a_resume_replays_from_the_store_while_the_engine_is_down(fake_engine, tmp_path):
    database = f"sqlite+aiosqlite:///{tmp_path}/gw.db"
    gateway = await GatewayProcess(fake_engine, tmp_path / "gw.log", SESSION_STORE="sqlite",
                                   DATABASE_URL=database).start()
    async with httpx.AsyncClient(timeout=30) as client:
        full = await read_stream(client, "POST", gateway.base_url + "/v1/chat/completions",
                                 json=chat(6, session_id="replay-1"))
    await gateway.stop()
    engine_url = fake_engine.base_url
    await fake_engine.stop()  # the engine is gone; the gateway starts without ever having seen it
    offline = GatewayProcess(fake_engine, tmp_path / "gw2.log", SESSION_STORE="sqlite", DATABASE_URL=database,
                             VLLM_BASE_URL=engine_url)
    offline.ready_path = "/livez"
    await offline.start()
    try:
        async with httpx.AsyncClient(timeout=30) as client:
            resumed = await read_stream(client, "POST", offline.base_url + "/v1/chat/completions",
                                        json=chat(6, session_id="replay-1"), headers={"Last-Event-ID": "replay-1:2"})
            fresh = await client.post(offline.base_url + "/v1/chat/completions", json=chat(6))
    finally:
        await offline.stop()
    assert resumed.status == 200
    assert [e.data for e in resumed.events] == [e.data for e in full.events[3:]]
    assert fresh.status_code == 503  # a new generation does need the engine


async def test_connections_beyond_max_connections_are_refused_by_the_server(fake_engine, tmp_path):
    gateway = await GatewayProcess(fake_engine, tmp_path / "gw.log", SESSION_STORE="off", MAX_CONNECTIONS="16").start()
    idle = []
    try:
        for _ in range(16):
            idle.append(await asyncio.open_connection("127.0.0.1", gateway.port))
        async with httpx.AsyncClient(timeout=10) as client:
            refused = await client.get(gateway.base_url + "/livez")
        for _, writer in idle:
            writer.close()
        async with httpx.AsyncClient(timeout=10) as client:
            async def live() -> bool:
                return (await client.get(gateway.base_url + "/livez")).status_code == 200

            await until(live, what="/livez once the idle connections closed", interval=0.05)
    finally:
        await gateway.stop()
    assert refused.status_code == 503


def rss_bytes(pid: int) -> int:
    """The process's resident memory (VmRSS of /proc/PID/status)."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")


BURST_KEYS = [f"sk-burst-{i}-0123456789abcdef" for i in range(5)]


async def burst(session: aiohttp.ClientSession, base_url: str, fake_engine,
                streams: int) -> list[tuple[int, dict, bytes]]:
    """``streams`` streams at once; the engine holds them all until every response's head is in.

    (aiohttp rather than httpx as the client here: 500 httpx streams cost this test process
    about 15 s of CPU, which the gateway's work would wait behind.)
    """
    fake_engine.hold = asyncio.Event()
    heads = 0
    everyone = asyncio.Event()

    async def one(i: int) -> tuple[int, dict, bytes]:
        nonlocal heads
        key = BURST_KEYS[i % len(BURST_KEYS)]
        async with session.post(base_url + "/v1/chat/completions", json=chat(20),
                                headers={"authorization": f"Bearer {key}"}) as response:
            heads += 1
            if heads == streams:
                everyone.set()
            await everyone.wait()
            return response.status, {k.lower(): v for k, v in response.headers.items()}, await response.read()

    tasks = [asyncio.create_task(one(i)) for i in range(streams)]
    await asyncio.wait_for(everyone.wait(), 120)
    fake_engine.hold.set()  # every admitted stream is open in the engine right now: let them run
    try:
        return await asyncio.gather(*tasks)
    finally:
        fake_engine.hold = None


async def test_500_concurrent_streams_then_memory_returns_near_its_start(fake_engine, tmp_path, figures):
    """500 streams open at once through a real gateway process, 20 more refused: only 429s, no leak.

    The upstream is the fake engine on purpose: it holds every stream open until all 520
    responses have begun (500 really concurrent in the gateway, which no CPU engine serves),
    and it costs the gateway nothing, so what is measured is the gateway alone. Sessions are
    on (SQLite), as ``make run`` has them.

    Memory: VmRSS after a warm-up burst of 100 (code paths, caches) is the start; after the
    520-stream burst, once every session has left memory (persisted), it must be within 30 MB
    of it, and a second identical burst must add less than 15 MB. Measured here: +16.5 MB after
    the first burst (its peak, VmHWM, is only 3 MB higher: the allocator keeps the arenas 500
    open sessions needed, and SQLite's page cache grows with the database, up to 2 MB per
    connection), +3.5 MB after the second. A leak of 30 kB per stream would add 15 MB per burst.
    """
    # This process holds 520 client sockets and 500 of the fake engine's; the gateway, which
    # inherits the limit, about 1,040. A default soft limit of 1,024 descriptors is too few.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < 4096:
        assert hard == resource.RLIM_INFINITY or hard >= 2048, f"RLIMIT_NOFILE hard limit {hard} < 2048"
        resource.setrlimit(resource.RLIMIT_NOFILE, (4096 if hard == resource.RLIM_INFINITY else min(hard, 4096), hard))
    database = f"sqlite+aiosqlite:///{tmp_path}/gw.db"
    gateway = await GatewayProcess(fake_engine, tmp_path / "gw.log", DATABASE_URL=database, API_KEYS=",".join(BURST_KEYS),
                                   MAX_INFLIGHT="500", METRICS_REQUIRE_AUTH="false",
                                   FLOW_CONTROL="false").start()  # (on, the 20 would wait for a slot, not 429)
    pid = gateway.process.pid
    connector = aiohttp.TCPConnector(limit=0)
    try:
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as client:
            async def settled() -> bool:
                async with client.get(gateway.base_url + "/metrics") as response:
                    metrics = await response.text()
                return "gateway_sessions_in_memory 0.0" in metrics and "gateway_requests_in_flight 0.0" in metrics

            await burst(client, gateway.base_url, fake_engine, 100)  # warm-up
            await until(settled, 60, what="the warm-up's sessions persisted and gone", interval=0.1)
            start = rss_bytes(pid)
            answers = await burst(client, gateway.base_url, fake_engine, 520)
            peak_streams = fake_engine.most_streams_active
            await until(settled, 60, what="the burst's sessions persisted and gone", interval=0.1)
            after = rss_bytes(pid)
            again = await burst(client, gateway.base_url, fake_engine, 520)
            await until(settled, 60, what="the second burst's sessions gone", interval=0.1)
            after_again = rss_bytes(pid)
    finally:
        await gateway.stop()
    for answers_of_a_burst in (answers, again):
        statuses = sorted(status for status, _, _ in answers_of_a_burst)
        assert statuses == [200] * 500 + [429] * 20
        for status, headers, body in answers_of_a_burst:
            if status == 429:
                assert headers["retry-after"] and orjson.loads(body)["error"]["message"]
            else:
                events = [line[6:] for line in body.decode().splitlines() if line.startswith("data: ")]
                assert events[-1] == "[DONE]" and len(events) == 1 + 20 + 1
    assert peak_streams == 500
    mb = 1024 * 1024
    figures.update(rss_start_mb=round(start / mb, 1), rss_after_burst_mb=round(after / mb, 1),
                   rss_after_second_burst_mb=round(after_again / mb, 1))
    assert after - start < 30 * mb, (start / mb, after / mb)
    assert after_again - after < 15 * mb, (after / mb, after_again / mb)


# --- the request head: its size and its time are bounded (gateway.http.request_head) ---

async def exchange(port: int, head: bytes, *, then: bytes = b"", timeout: float = 20) -> bytes:
    """Send ``head`` (then ``then``, as fast as the connection takes it) and read until the server closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head)
        with contextlib.suppress(ConnectionError):
            for _ in range(4000):  # up to 32 MB of more head, unless the server cuts it short
                if not then:
                    break
                writer.write(then)
                await writer.drain()
        return await asyncio.wait_for(reader.read(), timeout)
    except ConnectionError:  # the server closed with our bytes unread (a reset), or while we wrote
        return b""
    finally:
        writer.close()


async def test_a_request_head_over_its_bound_is_a_431_and_takes_no_memory(fake_engine, tmp_path):
    gateway = await GatewayProcess(fake_engine, tmp_path / "gw.log", SESSION_STORE="off",
                                   REQUEST_HEAD_MAX_BYTES="16384").start()
    try:
        start = rss_bytes(gateway.process.pid)
        many = b"".join(b"X-Header-%d: %s\r\n" % (i, b"v" * 100) for i in range(200))  # 200 headers, 22 KB
        one_big = b"X-Big: " + b"v" * 20_000 + b"\r\n"
        answers = [
            await exchange(gateway.port, b"GET /livez HTTP/1.1\r\nHost: x\r\n" + many + b"\r\n"),
            await exchange(gateway.port, b"GET /livez HTTP/1.1\r\nHost: x\r\n" + one_big + b"\r\n"),
            await exchange(gateway.port, b"GET /livez?" + b"q" * 20_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"),
        ]
        # One header without end: 32 MB of it, unless the gateway stops reading it first.
        flood = await exchange(gateway.port, b"GET /livez HTTP/1.1\r\nHost: x\r\nX-Flood: ", then=b"f" * 8192)
        grown = rss_bytes(gateway.process.pid) - start
        async with httpx.AsyncClient(timeout=10) as client:
            fine = await client.get(gateway.base_url + "/livez", headers={"X-Header": "v" * 10_000})
    finally:
        await gateway.stop()
    for answer in answers:
        assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
        assert b"REQUEST_HEAD_MAX_BYTES" in answer
    assert flood == b"" or flood.startswith(b"HTTP/1.1 431 "), flood[:200]
    assert grown < 16 * 1024 * 1024, f"the gateway's memory grew by {grown} bytes"  # (32 MB were sent)
    assert fine.status_code == 200  # a head within the bound is served


async def test_a_request_head_sent_slowly_is_a_408_and_a_silent_connection_is_closed(fake_engine, tmp_path):
    gateway = await GatewayProcess(fake_engine, tmp_path / "gw.log", SESSION_STORE="off",
                                   REQUEST_HEAD_TIMEOUT_SECONDS="1").start()
    try:
        loop = asyncio.get_running_loop()
        # Slow-loris: a header line every 0.2 s, for ever; the gateway ends it at about 1 s.
        reader, writer = await asyncio.open_connection("127.0.0.1", gateway.port)
        started = loop.time()
        writer.write(b"GET /livez HTTP/1.1\r\nHost: x\r\n")

        async def trickle() -> None:
            with contextlib.suppress(ConnectionError):
                for _ in range(100):  # 20 s at most: far past the bound the gateway must end it at
                    await asyncio.sleep(0.2)  # the attack's pace, not a synchronisation
                    writer.write(b"X-Slow: 1\r\n")
                    await writer.drain()

        trickling = asyncio.create_task(trickle())
        slow = await asyncio.wait_for(reader.read(), 20)
        slow_took = loop.time() - started
        trickling.cancel()
        writer.close()
        # A connection that sends nothing is closed, without an answer.
        reader, writer = await asyncio.open_connection("127.0.0.1", gateway.port)
        silent = await asyncio.wait_for(reader.read(), 20)
        writer.close()
        # Idle between two requests of a kept-alive connection is no slow head (keep-alive's 75 s rule it).
        async with httpx.AsyncClient(timeout=10, limits=httpx.Limits(max_keepalive_connections=1)) as client:
            first = await client.get(gateway.base_url + "/livez")
            await asyncio.sleep(1.5)  # longer than the head's bound, idle
            second = await client.get(gateway.base_url + "/livez")
            kept = [answer.extensions["network_stream"].get_extra_info("client_addr") for answer in (first, second)]
            streamed = await client.post(gateway.base_url + "/v1/chat/completions", json=chat(8))
    finally:
        await gateway.stop()
    assert slow.startswith(b"HTTP/1.1 408 "), slow[:200]
    assert b"REQUEST_HEAD_TIMEOUT_SECONDS" in slow
    assert slow_took < 10
    assert silent == b""
    assert first.status_code == second.status_code == streamed.status_code == 200
    assert kept[0] == kept[1]  # the same connection both times


async def test_a_stalled_body_is_ended_and_frees_its_keys_request_slots(fake_engine, tmp_path):
    """A head, a byte of body, then nothing: such requests held their key's slots for ever (429 for its others)."""
    gateway = await GatewayProcess(fake_engine, tmp_path / "gw.log", SESSION_STORE="off", API_KEYS="sk-stall-key-0123",
                                   MAX_INFLIGHT_PER_KEY="4", FLOW_CONTROL="false",
                                   REQUEST_BODY_TIMEOUT_SECONDS="1", REQUEST_BODY_MIN_RATE="500").start()
    body = orjson.dumps(chat(4, stream=False))
    head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-stall-key-0123\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
    try:
        stalled = [await asyncio.open_connection("127.0.0.1", gateway.port) for _ in range(4)]
        for _, writer in stalled:
            writer.write(head + body[:1])
        ends = await asyncio.gather(*(asyncio.wait_for(reader.read(), 20) for reader, _ in stalled))
        for _, writer in stalled:
            writer.close()
        # A body that keeps coming (1,000 bytes a second) is read to its end, however long it takes.
        reader, writer = await asyncio.open_connection("127.0.0.1", gateway.port)
        padded = body[:-1] + b" " * (2500 - len(body)) + b"}"
        writer.write(head.replace(b"%d" % len(body), b"%d" % len(padded)))
        for start in range(0, len(padded), 100):
            writer.write(padded[start:start + 100])
            await writer.drain()
            await asyncio.sleep(0.1)  # the client's pace, not a synchronisation
        steady = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 20)
        writer.close()
        async with httpx.AsyncClient(timeout=10) as client:
            after = await client.post(gateway.base_url + "/v1/chat/completions", content=body,
                                      headers={"Authorization": "Bearer sk-stall-key-0123"})
    finally:
        await gateway.stop()
    for end in ends:
        assert end.startswith(b"HTTP/1.1 408 "), end[:200]
        assert b"REQUEST_BODY_TIMEOUT_SECONDS" in end
    assert steady.startswith(b"HTTP/1.1 200 "), steady
    assert after.status_code == 200, after.text  # the key's slots are free again
