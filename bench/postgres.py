"""A throw-away PostgreSQL cluster for the persisted-sessions variant.

initdb + pg_ctl from the PostgreSQL 15 binaries, run as the ``postgres`` user (initdb
refuses root), in a temporary directory, on a free port; removed afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from bench.procs import ProcessTree, free_port

PG_BIN = Path(os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin"))


class PostgresUnavailable(RuntimeError):
    pass


async def _run(*argv: str, output: Path) -> None:
    # Output goes to a file, not a pipe: the server pg_ctl starts would inherit the pipe and
    # keep it open, so reading it to its end would never finish.
    with open(output, "wb") as sink:
        process = await asyncio.create_subprocess_exec(
            *argv, stdout=sink, stderr=asyncio.subprocess.STDOUT,
            stdin=asyncio.subprocess.DEVNULL)
    if await process.wait() != 0:
        text = output.read_text(errors="replace")[-800:]
        raise PostgresUnavailable(f"{' '.join(argv[:5])} failed: {text}")


def _as_postgres(*argv: str) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *argv]
    return list(argv)


@dataclass(frozen=True)
class PostgresCluster:
    dsn: str  # an asyncpg SQLAlchemy URL
    server: ProcessTree  # the postmaster and its backends, to count their CPU time


@contextlib.asynccontextmanager
async def throwaway_postgres(settings: dict[str, str] | None = None) -> AsyncIterator[PostgresCluster]:
    """Start a fresh cluster (``settings``: server options such as shared_buffers); stop and delete it afterwards."""
    if not (PG_BIN / "initdb").exists():
        raise PostgresUnavailable(f"no initdb under {PG_BIN} (set PG_BIN)")
    root = Path(tempfile.mkdtemp(prefix="bench-pg-"))
    data = root / "data"
    data.mkdir()
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(data, "postgres")
    port = free_port()
    try:
        await _run(*_as_postgres(str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust",
                                 "-U", "postgres", "--no-sync"), output=root / "initdb.out")
        options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c max_connections=200"
        options += "".join(f" -c {name}={value}" for name, value in (settings or {}).items())
        await _run(*_as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(data), "-o", options,
                                 "-l", str(root / "server.log"), "-w", "-t", "30", "start"),
                   output=root / "start.out")
        postmaster = int((data / "postmaster.pid").read_text().split()[0])
        try:
            yield PostgresCluster(f"postgresql+asyncpg://postgres@127.0.0.1:{port}/postgres",
                                  ProcessTree(postmaster))
        finally:
            await _run(*_as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "fast",
                                     "-w", "stop"), output=root / "stop.out")
    finally:
        shutil.rmtree(root, ignore_errors=True)
