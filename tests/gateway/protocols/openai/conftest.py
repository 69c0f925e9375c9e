"""The gateway on a real port in front of the real engine, and an OpenAI client for it."""

from __future__ import annotations

from urllib.parse import urlparse

import openai
import pytest

from gateway.app import create_app
from tests.support.engine_gateway import engine_settings
from tests.support.gateway import READ_KEY
from tests.support.servers import run_uvicorn
from tests.support.tcp_proxy import TcpProxy


@pytest.fixture(scope="module", params=["off", "sqlite"], ids=["plain-relay", "sessions"])
def gateway_url(request, vllm_engine, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gateway")
    settings = engine_settings(vllm_engine, tmp, session_store=request.param)
    with run_uvicorn(create_app(settings)) as url:
        yield url


@pytest.fixture
def sdk(gateway_url) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway_url + "/v1", api_key=READ_KEY, max_retries=0)


@pytest.fixture
def engine_model(vllm_engine) -> str:
    return vllm_engine.model


@pytest.fixture
def engine_proxy(vllm_engine):
    """A proxy to the engine that a test can shut down."""
    target = urlparse(vllm_engine.base_url)
    proxy = TcpProxy(target.hostname, target.port).start()
    yield proxy
    proxy.shutdown()


@pytest.fixture
def dead_engine_gateway_url(vllm_engine, engine_proxy, tmp_path):
    """A gateway whose engine was ready, then stopped answering."""
    settings = engine_settings(vllm_engine, tmp_path, vllm_base_url=engine_proxy.url)
    with run_uvicorn(create_app(settings)) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key=READ_KEY, max_retries=0)
        assert client.models.list().data  # ready through the proxy first
        engine_proxy.stop()
        yield url
