"""Instructions per request, counted by valgrind: a relay's cost that no other work on the machine changes.

    python -m bench.instructions [--requests 40] [--concurrency 4] [--variants off sqlite]
                                 [--baseline-tree DIR] [--no-nginx] [--idle] [--out bench/results/instructions.md]

A variant ``STORE+sampled`` (or ``+unsampled``) is that gateway with tracing on at ratio 1 (or 0),
its spans exported to a sink in this process (bench.tracing's): the batch processor's timer is
stretched too, so it exports when 512 spans have queued; with ``--requests 256`` (two spans a
request) one such export falls inside each counted scenario, as it would every 256 requests.

CPU time per request (bench.run) moves with whatever else the machine runs; the number of
instructions a process executes for the same work does not. Each server under test (the bare
aiohttp relay, nginx (bench/nginx.py, as one process: ``master_process off``), the gateway per
SESSION_STORE variant, and with ``--baseline-tree`` the gateway of another checkout) runs under
``valgrind --tool=callgrind`` in front of the fast fake upstream; after a warm-up the counters
are zeroed, a fixed number of requests is sent (streamed: 256 chunks; non-streamed: 16 tokens),
and the dump's total is divided by them.
Ratios against the bare relay are what to read (valgrind counts the interpreter too).

Valgrind slows Python about 50 times, so what the gateway does by the clock (session
writes, every ``SESSION_FLUSH_INTERVAL``; its looks at the engines, every
``ENGINE_POLL_INTERVAL`` and ``ENGINE_METRICS_INTERVAL``) would be done 50 times as often per
request; the servers run with those intervals stretched by the same factor (``--slowdown``).
The database pollers (batch worker, webhook delivery: ``BATCH_POLL_SECONDS``; the usage ledger's
flush: ``USAGE_FLUSH_SECONDS``) are stretched the same way. Not every clock can be stretched (the
key cache's poll of the key store is capped at 0.5 s by its setting's bound), so with ``--idle``
each scenario is followed by the same time without requests, counted the same way, and the
report also gives the figures net of that idle rate: what a request costs beyond what the
server does anyway in the time it takes under valgrind.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

import aiohttp

from bench.machine import REPO_ROOT
from bench.nginx import NAME as NGINX
from bench.nginx import nginx_binary, render_config
from bench.procs import PYTHON, free_port, start_fake_upstream, stop_server
from bench.tracing import Sink

API_KEY = "bench-key-not-a-secret"
HEADERS = {"authorization": f"Bearer {API_KEY}", "content-type": "application/json"}
MODEL = "fake-model"
STARTUP_TIMEOUT = 1200.0  # Python under valgrind starts about 50x slower (migrations included)


def server_argv(name: str, port: int, upstream: str, tmp: Path) -> list[str]:
    if name == NGINX:
        prefix = tmp / f"nginx-{port}"
        prefix.mkdir(parents=True, exist_ok=True)
        (prefix / "nginx.conf").write_text(render_config(upstream_url=upstream, port=port, prefix=prefix,
                                                         single_process=True))
        return [nginx_binary(), "-p", str(prefix), "-c", str(prefix / "nginx.conf"), "-e", "stderr"]
    if name == "bare-relay":
        return [PYTHON, "-m", "bench.relay_servers", "--client", "aiohttp", "--upstream", upstream, "--port", str(port)]
    return [PYTHON, "-m", "gateway"]


FLUSH_INTERVAL = 0.05  # the default SESSION_FLUSH_INTERVAL
# The engine looks the gateway takes by the clock: its poll of each engine (/v1/models) and its
# read of each engine's load (/metrics, every second). Unstretched, valgrind's slow clock
# made them about 50 times as frequent per request: ~30,000 instructions per non-streamed
# request, none of which a request costs at full speed (one read a second over thousands).
POLL_INTERVAL = 5.0      # the default ENGINE_POLL_INTERVAL
METRICS_INTERVAL = 1.0   # the default ENGINE_METRICS_INTERVAL
# The database pollers: the batch worker's and the webhook deliverer's look for due work (both
# BATCH_POLL_SECONDS) and the usage ledger's flush (USAGE_FLUSH_SECONDS). Unstretched they were
# most of the clock work under valgrind (a SQLAlchemy query through aiosqlite each, several a
# second of a wall clock that valgrind slows), and their share moved the per-request figures by
# 10-40 % between runs of the same tree; at full speed they are a few queries a second.
BATCH_POLL = 1.0         # the default BATCH_POLL_SECONDS
USAGE_FLUSH = 2.0        # the default USAGE_FLUSH_SECONDS (its bound: 300 s)


def server_env(name: str, port: int, upstream: str, tmp: Path, baseline: Path | None,
               slowdown: float = 50.0, traces: str | None = None) -> dict[str, str]:
    variant, _, base = name.partition("@")
    variant, _, traced = variant.partition("+")
    env = {**os.environ, "VLLM_BASE_URL": upstream, "HOST": "127.0.0.1", "PORT": str(port), "API_KEYS": API_KEY,
           "SESSION_STORE": variant if variant != "bare-relay" else "off", "ACCESS_LOG": "true",
           "DATABASE_URL": f"sqlite+aiosqlite:///{tmp}/{name}-{port}.db",
           "SESSION_FLUSH_INTERVAL": str(FLUSH_INTERVAL * slowdown),
           "ENGINE_POLL_INTERVAL": str(POLL_INTERVAL * slowdown),
           "ENGINE_METRICS_INTERVAL": str(METRICS_INTERVAL * slowdown),
           "BATCH_POLL_SECONDS": str(BATCH_POLL * slowdown),
           "USAGE_FLUSH_SECONDS": str(min(300.0, USAGE_FLUSH * slowdown)),
           "MAX_INFLIGHT": "4096", "MAX_INFLIGHT_PER_KEY": "4096",
           # The clock runs ~50x slower under valgrind: a connection the slowed server opens
           # to the fake upstream must not count as an engine that stopped answering.
           "UPSTREAM_CONNECT_TIMEOUT": str(5.0 * slowdown)}
    if base:
        env["PYTHONPATH"] = str(baseline)
    if traced:  # tracing on, exported to ``traces`` (bench.tracing's sink) by size, not by the clock
        env.update({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": traces or "",
                    "OTEL_TRACES_SAMPLER_ARG": "1" if traced == "sampled" else "0",
                    "OTEL_BSP_SCHEDULE_DELAY": str(int(5000 * slowdown))})
    return env


async def wait_up(url: str, deadline: float) -> None:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        while True:
            try:
                async with session.get(url + "/health") as response:
                    if response.status in (200, 404):
                        return
            except (TimeoutError, aiohttp.ClientError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not come up")
            await asyncio.sleep(0.5)


async def load(url: str, *, stream: bool, requests: int, concurrency: int) -> int:
    """Send ``requests`` chat completions, ``concurrency`` at a time; how many completed fully."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": stream,
            "max_tokens": 256 if stream else 16}
    done = 0
    queue = list(range(requests))
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as session:
        async def worker() -> None:
            nonlocal done
            while queue:
                queue.pop()
                async with session.post(url + "/v1/chat/completions", json=body, headers=HEADERS) as response:
                    payload = await response.read()
                    if response.status == 200 and (not stream or payload.rstrip().endswith(b"[DONE]")):
                        done += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return done


def control(command: str, pid: int, env: dict[str, str]) -> None:
    """``callgrind_control`` in the server's environment: valgrind names its control pipes after
    HOST and USER, which the server's environment sets (HOST is also the gateway's bind address)."""
    done = subprocess.run(["callgrind_control", command, str(pid)], capture_output=True, text=True, timeout=300,
                          env=env)
    if done.returncode != 0:
        raise RuntimeError(f"callgrind_control {command} failed: {done.stdout} {done.stderr}")


async def control_awake(command: str, pid: int, url: str, env: dict[str, str]) -> None:
    """``control`` while the server is woken with small requests: valgrind acts on the command
    only when the process runs, and an idle nginx worker sleeps in epoll_wait until traffic comes
    (the Python servers' timers wake them anyway)."""
    done = asyncio.ensure_future(asyncio.to_thread(control, command, pid, env))
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        while not done.done():
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with session.get(url + "/health") as response:
                    await response.read()
            await asyncio.wait([done], timeout=0.5)
    await done


async def dump_counters(pid: int, url: str, directory: Path, prefix: str, env: dict[str, str]) -> Path:
    """Ask callgrind for a dump of ``pid``; the file it wrote (``prefix`` or ``prefix.N``).

    Valgrind handles the request when the process next runs, so the server is woken up
    with a small request until a dump file is new or has changed.
    """
    def files() -> dict[Path, tuple[float, int]]:
        return {p: (p.stat().st_mtime, p.stat().st_size) for p in directory.glob(prefix + "*")}

    before = files()

    def written() -> list[Path]:
        now = files()
        return [p for p, seen in now.items() if seen[1] > 0 and before.get(p) != seen]

    await control_awake("-d", pid, url, env)
    deadline = time.monotonic() + 300
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        while not written():
            if time.monotonic() > deadline:
                raise TimeoutError("callgrind wrote no dump")
            try:
                async with session.get(url + "/livez") as response:
                    await response.read()
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.5)
    await asyncio.sleep(2.0)  # let the file be written out
    (dump,) = written()
    return dump


def callgrind_total(dump: Path) -> int:
    """The instruction total of one callgrind dump (all threads: --separate-threads=no)."""
    for line in dump.read_text(errors="replace").splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise ValueError(f"no totals in {dump}")


async def measure(name: str, *, upstream: str, tmp: Path, baseline: Path | None, requests: int,
                  concurrency: int, slowdown: float, idle: bool = False, traces: str | None = None) -> dict:
    port = free_port()
    out = tmp / f"callgrind.{name.replace('@', '-')}"
    argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}.%p", "--dump-instr=no",
            *server_argv(name, port, upstream, tmp)]
    log = open(tmp / f"{name}.log", "wb")
    env = server_env(name, port, upstream, tmp, baseline, slowdown, traces)
    process = subprocess.Popen(argv, cwd=str(REPO_ROOT) if name == "bare-relay" else str(tmp), env=env,
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=False)
    url = f"http://127.0.0.1:{port}"
    figures = {}
    try:
        await wait_up(url, time.monotonic() + STARTUP_TIMEOUT)
        worker = process.pid
        for stream in (False, True):
            await load(url, stream=stream, requests=max(4, concurrency), concurrency=concurrency)  # warm-up
            await control_awake("-z", worker, url, env)
            began = time.monotonic()
            completed = await load(url, stream=stream, requests=requests, concurrency=concurrency)
            seconds = time.monotonic() - began
            dump = await dump_counters(worker, url, tmp, f"{out.name}.{worker}", env)
            total = callgrind_total(dump)
            figure = {"completed": completed, "instructions_per_request": total / max(1, completed),
                      "seconds": seconds}
            if idle:  # the same time again without requests: the server's clock-driven work alone
                await control_awake("-z", worker, url, env)
                await asyncio.sleep(seconds)
                idle_total = callgrind_total(await dump_counters(worker, url, tmp, f"{out.name}.{worker}", env))
                figure["idle_instructions"] = idle_total
                figure["net_instructions_per_request"] = (total - idle_total) / max(1, completed)
            figures["stream" if stream else "non-stream"] = figure
    except BaseException:
        log.flush()
        tail = (tmp / f"{name}.log").read_text(errors="replace").splitlines()[-30:]
        print(f"{name} failed (exit code {process.poll()}); its log ends:", *tail, sep="\n", flush=True)
        raise
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(120)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()
    return figures


def report(results: dict[str, dict], *, requests: int, concurrency: int) -> str:
    bare = results.get("bare-relay", {})
    lines = [f"# Instructions per request (valgrind callgrind), {time.strftime('%Y-%m-%d')}", "",
             f"{requests} requests per scenario, {concurrency} at a time, fake upstream; streamed: 256 chunks, "
             "non-streamed: 16 tokens. Counted in the server process (interpreter included), so read the ratios; "
             "session writes batched over a flush interval stretched like valgrind stretches time.",
             "", "| server | non-streamed Minstr/req | ratio | streamed Minstr/req | ratio |", "|---|---|---|---|---|"]
    for name, figures in results.items():
        row = [name]
        for scenario in ("non-stream", "stream"):
            value = figures.get(scenario, {}).get("instructions_per_request")
            reference = bare.get(scenario, {}).get("instructions_per_request")
            row.append("-" if value is None else f"{value / 1e6:.2f}")
            row.append("-" if not value or not reference else f"{value / reference:.2f}x")
        lines.append("| " + " | ".join(row) + " |")
    if any("net_instructions_per_request" in figure for figures in results.values() for figure in figures.values()):
        lines += ["", "Net of the idle rate (`--idle`: each scenario's time again without requests, counted and "
                  "subtracted):", "",
                  "| server | non-streamed Minstr/req | ratio | streamed Minstr/req | ratio "
                  "| idle Minstr per scenario |",
                  "|---|---|---|---|---|---|"]
        for name, figures in results.items():
            row = [name]
            for scenario in ("non-stream", "stream"):
                value = figures.get(scenario, {}).get("net_instructions_per_request")
                reference = bare.get(scenario, {}).get("net_instructions_per_request")
                row.append("-" if value is None else f"{value / 1e6:.2f}")
                row.append("-" if not value or not reference else f"{value / reference:.2f}x")
            idles = [f"{figures[s]['idle_instructions'] / 1e6:.2f}" for s in ("non-stream", "stream")
                     if "idle_instructions" in figures.get(s, {})]
            row.append(" / ".join(idles) or "-")
            lines.append("| " + " | ".join(row) + " |")
    failed = [f"{name} {scenario} ({requests - figures[scenario]['completed']} of {requests})"
              for name, figures in results.items() for scenario in figures
              if figures[scenario]["completed"] < requests]
    if failed:  # a request that failed did less work: the figure per request is not comparable
        lines += ["", "**Not comparable, requests failed:** " + ", ".join(failed)]
    return "\n".join(lines) + "\n"


async def main_async(args: argparse.Namespace) -> None:
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    names = ["bare-relay", *([] if args.no_nginx else [NGINX]), *args.variants]
    if args.baseline_tree is not None:
        names += [f"{v}@base" for v in args.variants]
    with tempfile.TemporaryDirectory(prefix="bench-instr-") as tmp_name:
        tmp = Path(tmp_name)
        upstream = await start_fake_upstream(log_dir=tmp, cores=None)
        sink = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
        threading.Thread(target=sink.serve_forever, daemon=True).start()
        traces = f"http://127.0.0.1:{sink.server_address[1]}/v1/traces"
        results = {}
        try:
            for name in names:
                print(f"--- {name}", flush=True)
                results[name] = await measure(name, upstream=upstream.base_url, tmp=tmp,
                                              baseline=args.baseline_tree, requests=args.requests,
                                              concurrency=args.concurrency, slowdown=args.slowdown,
                                              idle=args.idle, traces=traces)
                print(f"  {results[name]}", flush=True)
        finally:
            await stop_server(upstream)
            sink.shutdown()
    text = report(results, requests=args.requests, concurrency=args.concurrency)
    if args.baseline_tree is not None:
        text += f"\n`@base`: the gateway of `{args.baseline_tree}` (git {_head(args.baseline_tree)}).\n"
    text += f"Measured tree: git {_head(REPO_ROOT)}.\n"
    args.out.write_text(text)
    print(text)


def _head(tree: Path) -> str:
    found = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return found.stdout.strip() or "?"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--variants", nargs="+", default=["off", "sqlite"])
    parser.add_argument("--baseline-tree", type=Path)
    parser.add_argument("--no-nginx", action="store_true", help="leave nginx out (it needs scripts/install_nginx.sh)")
    parser.add_argument("--slowdown", type=float, default=50.0,
                        help="how much slower Python runs under valgrind: clock-batched work is stretched by it")
    parser.add_argument("--idle", action="store_true",
                        help="also count each scenario's time without requests and report the figures net of it")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results" / "instructions.md")
    args = parser.parse_args(argv)
    if args.baseline_tree is not None:
        args.baseline_tree = args.baseline_tree.resolve()
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
