"""What serving the gateway with another ASGI server would keep and what it would break.

    python -m bench.server_checks [--servers uvicorn uvicorn-h11 granian hypercorn socketify]

For each server (bench/serve_gateway.py), a fresh gateway (plain relay, ``SESSION_STORE=off``)
in front of a slow fake upstream (one frame every 50 ms), and four checks of behaviour the
product relies on today under uvicorn:

- **lifespan**: a completion is answered (the engine client and the engine poll start in the
  app's lifespan; without it nothing is relayed);
- **disconnect**: a client leaves a stream after its first chunk; the gateway notices
  (``gateway_streams_ended_total{how="client_disconnect"}`` goes up) and closes its engine
  request, so vLLM stops generating for nobody;
- **drain**: SIGTERM to the server while a 20 s stream is open, ``GRACEFUL_SHUTDOWN_SECONDS=3``:
  the stream must end with the gateway's ``gateway_shutdown`` error event (gateway/serving.py),
  not be cut, and the process must exit;
- **connection bound**: ``MAX_CONNECTIONS=16`` and 24 streams (3 s each) at once: uvicorn
  answers the excess with 503 at once; a server without the bound serves all 24; how many were
  streamed at the same time says whether the excess waited instead.

Every wait has a deadline; the answers are written to bench/results/server-checks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import tempfile
import time
from pathlib import Path

import aiohttp

from bench.contenders import AUTH_HEADERS, FAKE_MODEL, start_gateway
from bench.procs import ServerFailedToStart, start_fake_upstream, stop_server
from bench.serve_gateway import SERVERS

RESULTS = Path(__file__).resolve().parent / "results" / "server-checks.md"
DEADLINE = 30.0
CHUNK_DELAY = 0.05
BOUND = 16  # MAX_CONNECTIONS's lowest allowed value
OVER_BOUND = 24


def _body(tokens: int, stream: bool = True) -> dict:
    return {"model": FAKE_MODEL, "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": tokens, "stream": stream}


def _session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=DEADLINE),
                                 headers=AUTH_HEADERS,
                                 connector=aiohttp.TCPConnector(limit=100, force_close=True))


async def _disconnects_counted(url: str) -> float:
    async with _session() as session, session.get(url + "/metrics") as response:
        text = await response.text()
    for line in text.splitlines():
        if line.startswith('gateway_streams_ended_total{how="client_disconnect"}'):
            return float(line.split()[-1])
    return 0.0


async def check_lifespan(url: str) -> str:
    async with _session() as session:
        async with session.post(url + "/v1/chat/completions", json=_body(3, stream=False)) as response:
            if response.status != 200:
                return f"broken: {response.status} {(await response.text())[:120]}"
            answer = await response.json()
    return "kept" if answer["choices"][0]["message"]["content"] else "broken: empty answer"


async def check_disconnect(url: str) -> str:
    before = await _disconnects_counted(url)
    async with _session() as session:
        response = await session.post(url + "/v1/chat/completions", json=_body(400))
        await response.content.readuntil(b"\n\n")
        response.close()  # leave mid-stream: the connection is closed, not returned
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if await _disconnects_counted(url) > before:
            return "kept"
        await asyncio.sleep(0.2)
    return "broken: the gateway did not notice the client leaving within 10 s (engine request kept)"


async def check_drain(gateway) -> str:
    async with _session() as session:
        response = await session.post(gateway.base_url + "/v1/chat/completions", json=_body(400))
        await response.content.readuntil(b"\n\n")
        gateway.process.send_signal(signal.SIGTERM)
        try:
            rest = await asyncio.wait_for(response.content.read(), DEADLINE)
            ended = "clean"
        except (TimeoutError, aiohttp.ClientError) as error:
            rest, ended = b"", f"cut ({type(error).__name__})"
    try:
        code = await asyncio.wait_for(gateway.process.wait(), DEADLINE)
    except TimeoutError:
        return "broken: still running 30 s after SIGTERM"
    if b"gateway_shutdown" in rest:
        return f"kept (the stream got its gateway_shutdown ending; exit {code})"
    if rest.rstrip().endswith(b"[DONE]"):
        return f"partly: the stream ran to its end, no drain ending (exit {code})"
    return f"broken: the stream was {ended} without the gateway's ending (exit {code})"


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The most (start, end) spans that overlap at any moment."""
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    now = most = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


async def check_bound(url: str) -> str:
    spans: list[tuple[float, float]] = []  # first chunk to end, of each stream served

    async def one(session) -> int | str:
        try:
            async with session.post(url + "/v1/chat/completions", json=_body(60)) as response:
                if response.status != 200:
                    await response.read()
                    return response.status
                await response.content.readuntil(b"\n\n")
                started = time.monotonic()
                await response.read()
                spans.append((started, time.monotonic()))
                return response.status
        except (TimeoutError, aiohttp.ClientError) as error:
            return type(error).__name__

    async with _session() as session:
        outcomes = await asyncio.gather(*(one(session) for _ in range(OVER_BOUND)))
    counts = {str(o): outcomes.count(o) for o in sorted(set(outcomes), key=str)}
    summary = ", ".join(f"{n}x {o}" for o, n in counts.items())
    at_once = f"; at most {most_at_once(spans)} streamed at once" if spans else ""
    if counts.get("503"):
        return f"kept: {summary}{at_once}"
    return f"not applied: {summary}{at_once} (none refused past MAX_CONNECTIONS={BOUND})"


async def check_server(server: str, upstream_url: str, tmp: Path) -> dict[str, str]:
    os.environ.update({"GRACEFUL_SHUTDOWN_SECONDS": "3", "MAX_CONNECTIONS": str(BOUND)})
    variant = "off" if server == "uvicorn" else f"off+{server}"
    try:
        gateway = await start_gateway(variant, upstream_url=upstream_url, tmp=tmp, log_dir=tmp,
                                      cores=None, postgres_dsn=None, name=f"check-{server}")
    except ServerFailedToStart as error:
        return {"lifespan": f"did not start: {str(error).splitlines()[0]}"}
    out = {}
    try:
        for name, check in (("lifespan", check_lifespan), ("disconnect", check_disconnect),
                            ("connection bound", check_bound)):
            try:
                out[name] = await check(gateway.base_url)
            except (TimeoutError, aiohttp.ClientError, OSError) as error:
                out[name] = f"broken: {type(error).__name__} {error}"
        out["SIGTERM drain"] = await check_drain(gateway)
    finally:
        await stop_server(gateway)
    return out


async def main_async(servers: list[str]) -> str:
    with tempfile.TemporaryDirectory(prefix="bench-checks-") as name:
        tmp = Path(name)
        upstream = await start_fake_upstream(log_dir=tmp, cores=None, chunk_delay=CHUNK_DELAY)
        try:
            rows = {}
            for server in servers:
                print(f"--- {server}", flush=True)
                rows[server] = await check_server(server, upstream.base_url, tmp)
                print(f"  {rows[server]}", flush=True)
        finally:
            with contextlib.suppress(Exception):
                await stop_server(upstream)
    checks = ("lifespan", "disconnect", "SIGTERM drain", "connection bound")
    lines = [f"# The gateway under other ASGI servers: what it keeps ({time.strftime('%Y-%m-%d')})", "",
             "`python -m bench.server_checks` (see its docstring for each check).", "",
             "| server | " + " | ".join(checks) + " |", "|---|" + "---|" * len(checks)]
    for server, row in rows.items():
        lines.append(f"| {SERVERS[server].description} | "
                     + " | ".join(row.get(c, "-") for c in checks) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", nargs="+", default=list(SERVERS), choices=list(SERVERS))
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    import uvloop

    text = uvloop.run(main_async(args.servers))
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
