"""The session store fails under load: a real gateway process in front of the real engine.

PostgreSQL stopped (every connection cut) and started again; SQLite on a filesystem that
fills up, then has room again (``small_disk``: a full tmpfs, or RLIMIT_FSIZE where mounting
is not allowed). Meanwhile a few clients keep streaming, named sessions and unnamed ones.
What must hold: every stream either completes (from memory: the store is not on a stream's
path) or is refused with a 503 that says why, never a 500 or a broken stream; what was
committed before the outage reads back unchanged; what was produced during it reaches the
store once it is back; and the gateway recovers by itself, without a restart.

``SESSION_MAX_UNPERSISTED_BYTES`` is small here (20 kB, a couple of streams' events), so the
outage also shows the bound on unpersisted events: new streams get 503 beyond it.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from dataclasses import dataclass

import asyncpg
import httpx
import pytest

from tests.support.engine_gateway import engine_chat_body
from tests.support.gateway_process import GatewayProcess
from tests.support.sse_client import Received, fresh_client, read_stream
from tests.support.waiting import until

pytestmark = [pytest.mark.integration, pytest.mark.engine]

CHAT = "/v1/chat/completions"
SHORT = 24  # tokens per stream: short, so each client streams many times during an outage
WORKERS = 3
BACKLOG_CAP = 20_000  # SESSION_MAX_UNPERSISTED_BYTES
STORE_ENV = {"SESSION_MAX_UNPERSISTED_BYTES": str(BACKLOG_CAP), "SESSION_LEASE_SECONDS": "60"}


@dataclass
class Outcome:
    phase: str            # before | outage | after (the store's state when the stream was asked for)
    named: bool
    started: float        # loop time
    got: Received

    @property
    def kind(self) -> str:
        got = self.got
        if got.status == 200 and not got.cut and got.dones == 1 and got.events[-1].done:
            last = got.events[-2].json
            if last.get("choices") and last["choices"][0].get("finish_reason") == "length":
                return "completed"
            return f"ended: {got.events[-2].data[:120]}"
        if got.status == 503:
            error = httpx.Response(503, content=got.body).json().get("error", {})
            if error.get("message") and error.get("code"):
                return "refused"
        return f"status {got.status}, cut={got.cut}: {got.body[:200]!r}"


class Load:
    """``WORKERS`` clients streaming one after another until stopped; every outcome kept."""

    def __init__(self, client: httpx.AsyncClient, engine) -> None:
        self.client = client
        self.engine = engine
        self.phase = "before"
        self.outcomes: list[Outcome] = []
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._work(worker)) for worker in range(WORKERS)]

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)

    async def _work(self, worker: int) -> None:
        loop = asyncio.get_running_loop()
        n = 0
        while not self._stop.is_set():
            named = n % 2 == 0
            extra = {"session_id": f"load-{worker}-{n}"} if named else {}
            phase, started = self.phase, loop.time()
            got = await read_stream(self.client, "POST", CHAT, json=engine_chat_body(self.engine, SHORT, **extra),
                                    timeout=60)
            self.outcomes.append(Outcome(phase, named, started, got))
            n += 1

    def of(self, phase: str) -> list[Outcome]:
        return [outcome for outcome in self.outcomes if outcome.phase == phase]


async def committed_sessions(client: httpx.AsyncClient, engine, count: int) -> dict[str, Received]:
    """``count`` named sessions streamed to the end before the outage, by session id."""
    done = {}
    for i in range(count):
        got = await read_stream(client, "POST", CHAT, json=engine_chat_body(engine, SHORT, session_id=f"kept-{i}"))
        assert got.status == 200 and got.dones == 1
        done[f"kept-{i}"] = got
    return done


async def run_outage(gateway: GatewayProcess, engine, *, break_store, restore_store, stored, figures) -> Load:
    """Commit sessions, break the store under load, restore it, and check what clients saw.

    ``stored(session_ids)``: {session id: (status, event count)} as the store itself holds them.
    """
    async with fresh_client(gateway.base_url, timeout=60) as client:
        kept = await committed_sessions(client, engine, 3)
        await until(lambda: _all_ended(stored, kept), 30, what="the sessions committed", interval=0.1)
        load = Load(client, engine)
        load.start()
        await until(lambda: len(load.outcomes) >= WORKERS, 60, what="the load running")

        await asyncio.to_thread(break_store)
        broken_at = time.monotonic()
        load.phase = "outage"
        # Until both kinds of refusal showed: a named session (its claim needs the store) and an
        # unnamed stream (once the events waiting for the store pass the bound).
        await until(lambda: {o.named for o in load.of("outage") if o.kind == "refused"} == {True, False}
                    and len(load.of("outage")) >= 2 * WORKERS, 90, what="both refusals during the outage")
        outage_s = time.monotonic() - broken_at

        await asyncio.to_thread(restore_store)
        restored_at = asyncio.get_running_loop().time()
        load.phase = "after"
        await until(lambda: sum(o.named and o.kind == "completed" for o in load.of("after")) >= WORKERS, 90,
                    what="named sessions completing again")
        # The first named stream asked for after the restore that completed: the ones asked for before
        # it were refused, so its start is when the gateway took sessions again.
        recovered_s = min(o.started for o in load.of("after") if o.named and o.kind == "completed") - restored_at
        await load.stop()

        # Everything produced from memory during the outage reaches the store once it is back.
        produced = {o.got.session_id: o.got for o in load.outcomes if o.kind == "completed"}
        await until(lambda: _all_ended(stored, produced), 60, what="the outage's sessions persisted", interval=0.2)
        # Read back through the gateway (from the store: finished sessions leave memory once persisted).
        outage_streams = {o.got.session_id: o.got for o in load.of("outage") if o.kind == "completed"}
        check = kept | dict(list(outage_streams.items())[:2])
        replays = {sid: await read_stream(client, "GET", f"/v1/sessions/{sid}/events") for sid in check}
        health = await client.get("/livez")
    assert gateway.process.poll() is None and health.status_code == 200  # never restarted, still serving

    kinds = [o.kind for o in load.outcomes]
    assert set(kinds) <= {"completed", "refused"}, [k for k in kinds if k not in ("completed", "refused")]
    for sid, got in check.items():
        assert [e.data for e in replays[sid].events] == [e.data for e in got.events], sid  # nothing lost
    refusals = [httpx.Response(503, content=o.got.body).json()["error"] for o in load.outcomes if o.kind == "refused"]
    assert {error["code"] for error in refusals} == {"session_store_unavailable"}
    figures.update(outage_s=round(outage_s, 1), recovered_after_restore_s=round(recovered_s, 2),
                   streams=len(kinds), completed=kinds.count("completed"), refused_503=kinds.count("refused"),
                   completed_during_outage=sum(o.kind == "completed" for o in load.of("outage")))
    return load


async def _all_ended(stored, sessions) -> bool:
    held = await stored(list(sessions))
    return all(held.get(sid) == ("ended", len(got.events)) for sid, got in sessions.items())


async def test_postgres_stopped_and_started_under_load(idle_vllm_engine, stoppable_postgres, tmp_path, figures):
    engine = idle_vllm_engine
    server = stoppable_postgres.server
    admin = await asyncpg.connect(server.dsn)
    try:
        await admin.execute('CREATE DATABASE "sessions"')
    finally:
        await admin.close()

    async def stored(session_ids: list[str]) -> dict[str, tuple[str, int]]:
        try:
            db = await asyncpg.connect(server.dsn_for("sessions"), timeout=5)
        except (OSError, asyncpg.PostgresError):
            return {}
        try:
            rows = await db.fetch("SELECT session_id, status, count FROM stream_sessions WHERE session_id = ANY($1)",
                                  session_ids)
        finally:
            await db.close()
        return {row["session_id"]: (row["status"], row["count"]) for row in rows}

    gateway = await GatewayProcess(engine, tmp_path / "gateway.log", SESSION_STORE="postgres",
                                   SESSIONS_DATABASE_URL=server.database_url("sessions"),
                                   DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path}/marketplace.db", **STORE_ENV).start()
    try:
        await run_outage(gateway, engine, break_store=stoppable_postgres.stop_server,
                         restore_store=stoppable_postgres.start_server, stored=stored, figures=figures)
    finally:
        await gateway.stop()


async def test_sqlite_on_a_full_filesystem_under_load(idle_vllm_engine, small_disk, tmp_path, figures):
    engine = idle_vllm_engine
    db_path = small_disk.path / "sessions.db"

    async def stored(session_ids: list[str]) -> dict[str, tuple[str, int]]:
        def read() -> dict[str, tuple[str, int]]:
            with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=5) as db:
                marks = ",".join("?" * len(session_ids))
                rows = db.execute(f"SELECT session_id, status, count FROM stream_sessions WHERE session_id IN ({marks})",
                                  session_ids).fetchall()
            return {sid: (status, count) for sid, status, count in rows}
        return await asyncio.to_thread(read)

    gateway = await GatewayProcess(engine, tmp_path / "gateway.log", SESSION_STORE="sqlite",
                                   SESSIONS_DATABASE_URL=f"sqlite+aiosqlite:///{db_path}",
                                   DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path}/marketplace.db", **STORE_ENV).start()
    try:
        await run_outage(gateway, engine, break_store=lambda: small_disk.fill(gateway.process.pid),
                         restore_store=small_disk.free, stored=stored, figures=figures)
    finally:
        await gateway.stop()
    figures["mechanism"] = small_disk.mechanism
