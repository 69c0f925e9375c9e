"""docs/keys.md's curl walk-through, run as written against a served gateway (fake engine behind it).

Only the gateway's address and the admin key (``$ADMIN_KEY``) are the test's.
"""

from __future__ import annotations

import asyncio
import os
import subprocess

from tests.support.docs import code_blocks, read_doc
from tests.support.fake_engine import settings_for
from tests.support.gateway import WRITE_KEY, running_gateway

DOCS_URL = "http://127.0.0.1:8000"
PAGE = read_doc("keys.md")
[CURL_WALK] = code_blocks(PAGE, "## The admin API with curl", "bash")


async def test_the_curl_walk_runs_as_written(fake_engine, tmp_path):
    settings = settings_for(fake_engine, database_url=f"sqlite+aiosqlite:///{tmp_path}/gateway.db",
                            admin_api_keys=[WRITE_KEY], session_store="off")
    async with running_gateway(settings) as (base_url, app):
        done = await asyncio.to_thread(
            subprocess.run, ["bash", "-e", "-c", CURL_WALK.replace(DOCS_URL, base_url)], cwd=tmp_path,
            env={**os.environ, "ADMIN_KEY": WRITE_KEY}, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        keys = await app.state.tenancy.store.list_keys(include_revoked=True)
    lines = done.stdout.splitlines()
    prefix = lines.pop(1)  # the listed key's prefix: its first secret's, before the rotation
    assert lines == ["the new key works", "the old secret still works", "30", "401", "team"]
    assert prefix.startswith("sk-gw-") and len(prefix) == 12 and prefix != keys.items[0].prefix
    assert len(keys.items) == 1 and keys.items[0].revoked_at is not None
