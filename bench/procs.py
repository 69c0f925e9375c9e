"""Starting, pinning, watching and stopping the benchmark's server processes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import psutil

PYTHON = sys.executable


def free_port() -> int:
    """A TCP port nobody listens on right now (bind to port 0 and let the kernel choose)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def raise_fd_limit(wanted: int = 65536) -> int:
    """Raise this process's open-file limit (children inherit it); return the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def boost_priority(niceness: int) -> int:
    """Run this process (and the children it starts) at ``niceness`` (negative = favoured).

    The machine may be shared with other work; a favoured benchmark is disturbed less.
    Returns the niceness in effect (unchanged when not permitted).
    """
    try:
        os.setpriority(os.PRIO_PROCESS, 0, niceness)
    except (PermissionError, OSError):
        pass
    return os.getpriority(os.PRIO_PROCESS, 0)


@dataclass(frozen=True)
class Pinning:
    """Which cores the load side (load generator + fake upstream) and the server under test use.

    With two or more cores the server under test gets a core of its own, so its cost shows as
    its own CPU time instead of being hidden by competing with the load generator.
    """

    load_cores: frozenset[int] | None
    server_cores: frozenset[int] | None

    @classmethod
    def choose(cls, enabled: bool) -> "Pinning":
        cores = sorted(os.sched_getaffinity(0))
        if not enabled or len(cores) < 2:
            return cls(None, None)
        return cls(frozenset(cores[:1]), frozenset(cores[1:2]))

    def describe(self) -> str:
        if self.load_cores is None:
            return "not pinned (all processes share all cores)"
        return (f"load generator + fake upstream pinned to core {sorted(self.load_cores)}, "
                f"server under test (gateway or relay) pinned to core {sorted(self.server_cores)}")

    def pin_self(self) -> None:
        if self.load_cores is not None:
            os.sched_setaffinity(0, self.load_cores)


@dataclass
class ServerProcess:
    """A child server: its process, where it listens and where its output goes."""

    name: str
    process: asyncio.subprocess.Process
    base_url: str
    log_path: Path
    cores: frozenset[int] | None = None
    _psutil: psutil.Process | None = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        return self.process.pid

    def stats(self) -> psutil.Process:
        if self._psutil is None:
            self._psutil = psutil.Process(self.pid)
        return self._psutil

    def _tree(self) -> list[psutil.Process]:
        # A server may work in child processes (nginx's worker, granian's): they count as its own.
        main = self.stats()
        try:
            return [main, *main.children(recursive=True)]
        except psutil.NoSuchProcess:
            return [main]

    def _tree_cpu(self) -> float:
        total = 0.0
        for process in self._tree():
            try:
                times = process.cpu_times()
            except psutil.NoSuchProcess:
                continue
            total += times.user + times.system
        return total

    def _tree_rss(self) -> int:
        total = 0
        for process in self._tree():
            try:
                total += process.memory_info().rss
            except psutil.NoSuchProcess:
                continue
        return total

    async def cpu_seconds(self) -> float:
        """User + system CPU time used so far, by the process and its children."""
        return await asyncio.to_thread(self._tree_cpu)

    async def rss_bytes(self) -> int:
        """Resident set size right now, of the process and its children."""
        return await asyncio.to_thread(self._tree_rss)

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class ProcessTree:
    """A process and its children (e.g. a database server and its backends)."""

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)

    def _cpu(self) -> float:
        total = 0.0
        for process in [self.process, *self.process.children(recursive=True)]:
            try:
                times = process.cpu_times()
            except psutil.NoSuchProcess:
                continue
            total += times.user + times.system
        return total

    async def cpu_seconds(self) -> float:
        """User + system CPU time of the process and its current children."""
        return await asyncio.to_thread(self._cpu)

    def pin(self, cores: frozenset[int]) -> None:
        """Pin the process and its children (children forked later inherit it)."""
        for process in [self.process, *self.process.children(recursive=True)]:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.cpu_affinity(sorted(cores))


async def start_server(*, name: str, argv: list[str], port: int, log_dir: Path,
                       env: dict[str, str] | None = None, cores: frozenset[int] | None = None,
                       health_path: str = "/health", startup_timeout: float = 30.0,
                       cwd: str | None = None) -> ServerProcess:
    """Start ``argv`` pinned to ``cores`` and wait until ``health_path`` answers 200."""
    log_path = log_dir / f"{name}.log"
    log_file = open(log_path, "wb")
    def pin() -> None:  # in the child; by hand because uvloop's subprocess_exec takes no process_group
        os.setpgid(0, 0)  # its own group, not its own session: one scheduler autogroup for all parties
        if cores:
            os.sched_setaffinity(0, cores)

    process = await asyncio.create_subprocess_exec(
        *argv, stdout=log_file, stderr=asyncio.subprocess.STDOUT, stdin=asyncio.subprocess.DEVNULL,
        env={**os.environ, **(env or {})}, preexec_fn=pin, cwd=cwd)
    log_file.close()
    server = ServerProcess(name, process, f"http://127.0.0.1:{port}", log_path, cores)
    try:
        await wait_healthy(server, health_path=health_path, timeout=startup_timeout)
    except BaseException:
        await stop_server(server)
        raise
    return server


class ServerFailedToStart(RuntimeError):
    pass


async def wait_healthy(server: ServerProcess, *, health_path: str, timeout: float) -> None:
    """Poll ``health_path`` until it answers 200; fail early if the process exits."""
    deadline = time.monotonic() + timeout
    url = server.base_url + health_path
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
        while True:
            if server.process.returncode is not None:
                raise ServerFailedToStart(
                    f"{server.name} exited with {server.process.returncode}:\n"
                    f"{server.log_tail()}")
            try:
                async with session.get(url) as response:
                    if response.status == 200:
                        return
            except (TimeoutError, aiohttp.ClientError, OSError):
                pass
            if time.monotonic() > deadline:
                raise ServerFailedToStart(
                    f"{server.name} not healthy at {url} after {timeout:.0f}s:\n"
                    f"{server.log_tail()}")
            await asyncio.sleep(0.1)


async def stop_server(server: ServerProcess, *, grace: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after ``grace`` seconds (or at once if cancelled meanwhile)."""
    if server.process.returncode is not None:
        return
    try:
        server.process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(server.process.wait(), grace)
    except ProcessLookupError:
        return
    except (TimeoutError, asyncio.CancelledError):
        # Also when the run itself is being cancelled: never leave a server behind.
        with contextlib.suppress(ProcessLookupError):
            server.process.kill()
        await asyncio.shield(server.process.wait())


async def start_fake_upstream(*, log_dir: Path, cores: frozenset[int] | None,
                              model: str = "fake-model", chunk_delay: float = 0.0,
                              name: str = "fake-upstream") -> ServerProcess:
    """The fast fake vLLM on a free port."""
    port = free_port()
    argv = [PYTHON, "-m", "bench.fake_upstream", "--port", str(port), "--model", model,
            "--chunk-delay", str(chunk_delay)]
    return await start_server(name=name, argv=argv, port=port, log_dir=log_dir, cores=cores,
                              cwd=str(Path(__file__).resolve().parent.parent))
