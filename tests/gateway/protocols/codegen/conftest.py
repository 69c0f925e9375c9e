"""The gateway under real uvicorn in front of the real vLLM engine, as Stack 2.9 clients see it.

No API key is configured, as in the old service's documentation: the gateway then serves
loopback only, which is where the tests talk to it.
"""

from __future__ import annotations

import pytest
import requests

from gateway.app import create_app
from gateway.config import Settings
from tests.support.servers import run_uvicorn


@pytest.fixture(scope="module")
def api_url(vllm_engine, tmp_path_factory) -> str:
    """Base URL of a gateway serving the code API from the session's engine."""
    tmp = tmp_path_factory.mktemp("codegen-gateway")
    settings = Settings(
        vllm_base_url=vllm_engine.base_url,
        vllm_api_key=vllm_engine.api_key,
        database_url=f"sqlite+aiosqlite:///{tmp}/gateway.db",
        session_store="off",
        access_log=False,
    )
    with run_uvicorn(create_app(settings)) as url:
        yield url


@pytest.fixture
def engine_call(vllm_engine):
    """POST straight to the engine (bypassing the gateway), for comparing answers."""

    def call(path: str, payload: dict) -> dict:
        response = requests.post(vllm_engine.base_url + path, json={"model": vllm_engine.model, **payload},
                                 headers=vllm_engine.headers, timeout=300)
        response.raise_for_status()
        return response.json()

    return call
