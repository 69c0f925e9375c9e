"""The gateway under real uvicorn in front of the real engine, with two client keys and an admin key.

Module-scoped: one gateway per test module (SQLite sessions and stored responses in the
module's own folder). Helpers read the engine directly (its metrics, or the same request
sent without the gateway) so expected values never come from the code under test.
"""

from __future__ import annotations

import time

import httpx
import pytest

from gateway.app import create_app
from gateway.config import Settings
from gateway.http.auth import hash_key
from gateway.http.key_ids import key_id as hmac_key_id
from tests.support.servers import run_uvicorn

KEY_A = "sk-surface-key-a-0123456789"
KEY_B = "sk-surface-key-b-9876543210"
ADMIN_KEY = "sk-surface-admin-5555555555"
RUNNING = "vllm:num_requests_running"
KEY_ID_SECRET = "surface-key-id-secret-0123456789"


def key_id(key: str) -> str:
    """The key id the gateway labels a key's metrics and resources with (an HMAC of the key's digest)."""
    return hmac_key_id(hash_key(key), KEY_ID_SECRET.encode())


def surface_settings(engine, tmp_path, **overrides) -> Settings:
    values = dict(
        vllm_base_url=engine.base_url,
        vllm_api_key=engine.api_key,
        api_keys=[KEY_A, KEY_B],
        admin_api_keys=[ADMIN_KEY],
        database_url=f"sqlite+aiosqlite:///{tmp_path}/gateway.db",
        key_id_secret=KEY_ID_SECRET,
        session_store="sqlite",
        sse_keepalive_seconds=2.0,
        access_log=False,
        engine_poll_interval=60,
        features=["none"],
    )
    values.update(overrides)
    return Settings(**values)


@pytest.fixture(scope="module")
def gateway_url(vllm_engine, tmp_path_factory):
    settings = surface_settings(vllm_engine, tmp_path_factory.mktemp("surface"))
    with run_uvicorn(create_app(settings)) as url:
        yield url


def headers(key: str = KEY_A) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def engine_post(engine, path: str, body: dict) -> httpx.Response:
    """The same request sent to the engine itself, without the gateway."""
    return httpx.post(engine.base_url + path, json=body, headers=engine.headers, timeout=120)


def wait_for_metric(engine, name: str, predicate, *, timeout: float = 30.0) -> float:
    deadline = time.monotonic() + timeout
    while True:
        value = engine.metrics().get(name, 0.0)
        if predicate(value):
            return value
        assert time.monotonic() < deadline, f"{name} is still {value} after {timeout}s"
        time.sleep(0.05)


def gateway_tokens(url: str, key: str) -> dict[str, float]:
    """``gateway_tokens_total`` of ``key``, by kind, from the gateway's /metrics."""
    text = httpx.get(url + "/metrics", headers=headers(ADMIN_KEY), timeout=10).text
    found = {"prompt": 0.0, "completion": 0.0}
    for line in text.splitlines():
        if line.startswith("gateway_tokens_total{") and f'key_id="{key_id(key)}"' in line:
            kind = line.split('kind="', 1)[1].split('"', 1)[0]
            found[kind] = float(line.rsplit(" ", 1)[1])
    return found
