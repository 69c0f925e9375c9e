"""Who used the CPU during a measured window: the server, the load side, everybody else.

The machine may be shared. Counting the CPU time of the processes the benchmark knows
(this process, which runs the load generator; the fake upstream; the server under test)
against the whole machine's busy time shows how much of the window other work took, so a
disturbed round is visible in the results instead of silently skewing them.
"""

from __future__ import annotations

import asyncio
import resource
import time
from dataclasses import dataclass

import psutil

from bench.procs import ServerProcess


def _self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _machine_busy() -> float:
    times = psutil.cpu_times()
    return sum(times) - times.idle - getattr(times, "iowait", 0.0)


@dataclass
class CpuSnapshot:
    at: float
    machine_busy: float
    load_generator: float
    load_servers: float
    server: float | None


async def snapshot(*, load_servers: list[ServerProcess], server: ServerProcess | None,
                   companions: tuple = ()) -> CpuSnapshot:
    """CPU seconds so far of the machine and of each party.

    ``companions`` (e.g. the PostgreSQL server a gateway variant writes to) count as the
    server's own cost.
    """
    load_servers_cpu = 0.0
    for process in load_servers:
        load_servers_cpu += await process.cpu_seconds()
    server_cpu = await server.cpu_seconds() if server is not None else None
    for companion in companions:
        server_cpu = (server_cpu or 0.0) + await companion.cpu_seconds()
    return CpuSnapshot(
        at=time.perf_counter(),
        machine_busy=await asyncio.to_thread(_machine_busy),
        load_generator=_self_cpu(),
        load_servers=load_servers_cpu,
        server=server_cpu,
    )


def usage_between(before: CpuSnapshot, after: CpuSnapshot, *, requests: int) -> dict:
    """CPU per request of the server and of the load side; other work's share of the machine."""
    elapsed = after.at - before.at
    load = (after.load_generator - before.load_generator
            + after.load_servers - before.load_servers)
    server = None if before.server is None else after.server - before.server
    others = (after.machine_busy - before.machine_busy) - load - (server or 0.0)
    cores = psutil.cpu_count() or 1
    return {
        "server_cpu_s": server,
        "server_cpu_us_per_request": server * 1e6 / requests if server is not None and requests
        else None,
        "load_cpu_us_per_request": load * 1e6 / requests if requests else None,
        "others_cpu_share": max(0.0, others) / (elapsed * cores) if elapsed > 0 else None,
    }


async def wait_until_quiet(*, max_wait: float, threshold: float = 0.15,
                           window: float = 5.0) -> float | None:
    """Wait (up to ``max_wait`` s) for a ``window`` in which the machine is <= ``threshold`` busy.

    Call before starting any benchmark process. Returns the busy share of the last window
    (None when not waiting at all).
    """
    if max_wait <= 0:
        return None
    deadline = time.monotonic() + max_wait
    cores = psutil.cpu_count() or 1
    while True:
        busy_before, started = await asyncio.to_thread(_machine_busy), time.perf_counter()
        await asyncio.sleep(window)
        busy = (await asyncio.to_thread(_machine_busy) - busy_before) / (
            (time.perf_counter() - started) * cores)
        if busy <= threshold or time.monotonic() >= deadline:
            return busy
        print(f"machine {100 * busy:.0f}% busy with other work; waiting for it to settle",
              flush=True)
