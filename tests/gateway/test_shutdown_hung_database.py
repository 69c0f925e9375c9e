"""A gateway stopped with SIGTERM while its PostgreSQL hangs (frozen with SIGSTOP: a partition, a frozen host).

Closing an asyncpg connection waits for the server to acknowledge it, without a bound of its
own: the marketplace's engine, the session store's LISTEN connection (and, without a cut after
their bound, the pools) waited for a server that never answers, so the process never exited and
its orchestrator had to kill it. Every close is bounded now; the drain and the stores' bounded
calls (the session store's last writes, its replica's retirement) come before.
"""

from __future__ import annotations

import signal
import time

import httpx
import pytest

from tests.support.gateway import WRITE_KEY, bearer
from tests.support.gateway_process import GatewayProcess

pytestmark = [pytest.mark.integration, pytest.mark.engine, pytest.mark.postgres]

# The drain (1 s), the session store's two bounded calls (1 s each), the resolver's poll (2 s),
# and four closes of at most 2 s each (marketplace, responses, session store, the gateway's own
# engine), with room for a loaded machine; the old code never exited.
EXIT_WITHIN_SECONDS = 30


async def test_a_gateway_whose_postgresql_hangs_exits_on_sigterm(idle_vllm_engine, stoppable_postgres, tmp_path):
    engine = idle_vllm_engine
    database_url = stoppable_postgres.server.database_url("postgres")
    gateway = GatewayProcess(engine, tmp_path / "gateway.log", DATABASE_URL=database_url, SESSION_STORE="postgres",
                             ADMIN_API_KEYS=WRITE_KEY, KEY_ID_SECRET="0" * 64, GRACEFUL_SHUTDOWN_SECONDS="1",
                             SESSION_STORE_TIMEOUT_SECONDS="1", DATABASE_TIMEOUT_SECONDS="1")
    await gateway.start(timeout=60)
    try:
        async with httpx.AsyncClient(base_url=gateway.base_url, timeout=30) as client:
            created = await client.post("/admin/keys", json={"name": "k"}, headers=bearer(WRITE_KEY))
            assert created.status_code == 201, created.text
            key = bearer(created.json()["key"])
            answer = await client.post("/v1/chat/completions", headers=key, json={
                "model": engine.model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
                "stream": True, "session_id": "before-the-hang"})
            assert answer.status_code == 200 and answer.text.rstrip().endswith("data: [DONE]")
            assert (await client.get("/api/categories", headers=key)).status_code == 200  # the marketplace's database in use
        stoppable_postgres.freeze()
        started = time.monotonic()
        # (stop() kills a gateway still running past its timeout, and fails the test)
        await gateway.stop(signal.SIGTERM, timeout=EXIT_WITHIN_SECONDS)
        assert time.monotonic() - started < EXIT_WITHIN_SECONDS
    finally:
        stoppable_postgres.thaw()
        await gateway.stop(signal.SIGKILL)
