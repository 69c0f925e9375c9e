"""bench/contenders.py and bench/serve_gateway.py: what each contender's name means and how it starts.

One test serves the real gateway app with another server (uvicorn on h11, which needs nothing
beyond the gateway environment) in front of the fake upstream, through the same start-up path
bench.run uses.
"""

from __future__ import annotations

import aiohttp
import psutil
import pytest

import bench.contenders
from bench.contenders import (
    AUTH_HEADERS,
    display_name,
    gateway_argv,
    gateway_env,
    split_name,
    start_contender,
    with_servers,
)
from bench.fake_upstream import FakeEngineConfig, serve
from bench.procs import ServerFailedToStart, stop_server


def test_a_name_says_store_server_and_tree():
    assert split_name("sqlite") == ("sqlite", "uvicorn", False)
    assert split_name("off+granian") == ("off", "granian", False)
    assert split_name("postgres@base") == ("postgres", "uvicorn", True)
    assert display_name("sqlite+hypercorn") == "sessions, SQLite, served by hypercorn"
    assert display_name("off@base") == "plain relay @base"
    assert display_name("nginx") == "nginx, 1 worker (reference)"


def test_other_servers_are_added_for_the_chosen_variants_only():
    assert with_servers(["sqlite", "off", "sqlite@base"], ["uvicorn", "granian", "hypercorn"],
                        only=["sqlite"]) == ["sqlite", "sqlite+granian", "sqlite+hypercorn", "off",
                                             "sqlite@base"]


def test_each_server_gets_the_same_settings_and_its_own_command(tmp_path, monkeypatch):
    plain = gateway_env("sqlite", upstream_url="http://u", port=1, tmp=tmp_path, postgres_dsn=None)
    served = gateway_env("sqlite+granian", upstream_url="http://u", port=1, tmp=tmp_path,
                         postgres_dsn=None)
    assert served.pop("PYTHONPATH") == str(bench.contenders.REPO_ROOT)
    assert served == plain and plain["SESSION_STORE"] == "sqlite"
    assert gateway_argv("sqlite")[1:] == ["-m", "gateway"]
    assert gateway_argv("sqlite+uvicorn-h11")[1:] == ["-m", "bench.serve_gateway", "--server", "uvicorn-h11"]
    monkeypatch.setattr(bench.contenders, "SERVERS_PYTHON", str(tmp_path / "missing" / "python"))
    with pytest.raises(ServerFailedToStart, match="scripts/install_bench_servers.sh"):
        gateway_argv("sqlite+granian")
    with pytest.raises(ServerFailedToStart, match="do not combine"):
        gateway_argv("sqlite+granian@base")


async def test_the_gateway_app_served_by_another_server_relays_a_completion(tmp_path):
    upstream = await serve(host="127.0.0.1", port=0, config=FakeEngineConfig(model="fake-model"))
    upstream_url = f"http://127.0.0.1:{upstream.sockets[0].getsockname()[1]}"
    gateway = await start_contender("off+uvicorn-h11", upstream_url=upstream_url, tmp=tmp_path,
                                    cores=None, postgres_dsn=None)
    try:
        assert psutil.Process(gateway.pid).cmdline()[-3:] == ["bench.serve_gateway", "--server", "uvicorn-h11"]
        body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
            async with session.post(gateway.base_url + "/v1/chat/completions", json=body,
                                    headers=AUTH_HEADERS) as response:
                answer = await response.json()
            async with session.post(gateway.base_url + "/v1/chat/completions", json=body) as refused:
                assert refused.status == 401  # the product's own app: its authentication too
        assert response.status == 200
        assert answer["choices"][0]["message"]["content"] == " the quick brown"
    finally:
        await stop_server(gateway)
        upstream.close()
        await upstream.wait_closed()
