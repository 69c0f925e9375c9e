"""The servers bench.run puts between the load generator and the upstream, and how each starts.

A contender's name says what it is:

- ``off``, ``memory``, ``sqlite``, ``postgres``: the gateway (``python -m gateway``, uvicorn) with
  that ``SESSION_STORE``; ``sqlite`` is the gateway's default;
- ``sqlite@base``: the same, from another checkout (``--baseline-tree``);
- ``sqlite+granian``: the same app served by another ASGI server (``bench/serve_gateway.py``);
- ``bare-relay``: a ~40-line aiohttp relay with no features (``bench/relay_servers.py``), the
  floor a Python relay reaches on this machine;
- ``nginx``: Debian's nginx, one worker (``bench/nginx.py``), the compiled-relay reference.

Every contender is pinned to the same core(s) and answers ``/health`` before it is measured.
"""

from __future__ import annotations

import os
from pathlib import Path

from bench.nginx import NAME as NGINX
from bench.nginx import start_nginx
from bench.procs import PYTHON, ServerFailedToStart, ServerProcess, free_port, start_server
from bench.serve_gateway import SERVERS

REPO_ROOT = Path(__file__).resolve().parent.parent
VARIANTS = ("off", "memory", "sqlite", "postgres")
DEFAULT_VARIANT = "sqlite"  # SESSION_STORE's default: "the gateway with its default settings"
BARE_RELAY = "bare-relay"
REFERENCES = (BARE_RELAY, NGINX)
BASELINE = "@base"
NO_FLOW = "~noflow"  # a variant with FLOW_CONTROL=false: "off~noflow" next to "off" measures flow control's cost
DEFAULT_SERVER = "uvicorn"
FAKE_MODEL = "fake-model"
API_KEY = "bench-key-not-a-secret"
AUTH_HEADERS = {"authorization": f"Bearer {API_KEY}"}
# granian, hypercorn, socketify: scripts/install_bench_servers.sh
SERVERS_PYTHON = os.environ.get("BENCH_SERVERS_PYTHON",
                                str(REPO_ROOT / ".venvs" / "bench-servers" / "bin" / "python"))

BASELINE_TREE: Path | None = None  # set from --baseline-tree

_NAMES = {
    "off": "plain relay",
    "memory": "sessions, in-memory store",
    "sqlite": "sessions, SQLite",
    "postgres": "sessions, PostgreSQL",
    BARE_RELAY: "bare aiohttp relay (reference)",
    NGINX: "nginx, 1 worker (reference)",
}


def split_name(name: str) -> tuple[str, str, bool]:
    """``sqlite+granian@base`` -> (session store, ASGI server, from the baseline tree); ``~noflow`` is ignored."""
    name = name.replace(NO_FLOW, "")
    name, base, _ = name.partition(BASELINE)
    store, _, server = name.partition("+")
    return store, server or DEFAULT_SERVER, bool(base)


def display_name(name: str) -> str:
    """How reports call a contender."""
    if name in _NAMES:
        return _NAMES[name]
    store, server, base = split_name(name)
    text = _NAMES.get(store, store) + (", flow control off" if NO_FLOW in name else "")
    if server != DEFAULT_SERVER:
        text += f", served by {server}"
    return text + (" @base" if base else "")


def with_servers(variants: list[str], servers: list[str], *, only: list[str]) -> list[str]:
    """Each variant served by uvicorn, then (variants in ``only``, not @base) by each other server."""
    out = []
    for variant in variants:
        out.append(variant)
        if variant in only:
            out += [f"{variant}+{server}" for server in servers if server != DEFAULT_SERVER]
    return out


def gateway_env(variant: str, *, upstream_url: str, port: int, tmp: Path,
                postgres_dsn: str | None) -> dict[str, str]:
    """The environment of a gateway under test (limits raised to fit the benchmark's load)."""
    store, server, base = split_name(variant)
    env = {
        "VLLM_BASE_URL": upstream_url,
        "HOST": "127.0.0.1",
        "PORT": str(port),
        "API_KEYS": API_KEY,
        "SESSION_STORE": store,
        "DATABASE_URL": f"sqlite+aiosqlite:///{tmp}/marketplace-{store}-{port}.db",
        # Admission control stays on; its limits must not be what the benchmark measures.
        "MAX_INFLIGHT": "4096",
        "MAX_INFLIGHT_PER_KEY": "4096",
        "UPSTREAM_MAX_CONNECTIONS": "2048",
    }
    if NO_FLOW in variant:
        env["FLOW_CONTROL"] = "false"
    if store == "sqlite":
        env["SESSIONS_DATABASE_URL"] = f"sqlite+aiosqlite:///{tmp}/sessions-{port}.db"
    elif store == "postgres" and postgres_dsn:
        env["SESSIONS_DATABASE_URL"] = postgres_dsn
    if base:
        if BASELINE_TREE is None:
            raise ServerFailedToStart("a baseline variant needs --baseline-tree")
        env["PYTHONPATH"] = str(BASELINE_TREE)  # its gateway and marketplace packages win over ours
    elif server != DEFAULT_SERVER:
        env["PYTHONPATH"] = str(REPO_ROOT)  # bench.serve_gateway, started from the temporary directory
    return env


def gateway_argv(variant: str) -> list[str]:
    _, server, base = split_name(variant)
    if server == DEFAULT_SERVER:
        return [PYTHON, "-m", "gateway"]
    if base:
        raise ServerFailedToStart("another server and --baseline-tree do not combine")
    if server not in SERVERS:
        raise ServerFailedToStart(f"unknown server {server!r} (choose from {', '.join(SERVERS)})")
    python = SERVERS_PYTHON if SERVERS[server].needs_servers_env else PYTHON
    if not os.access(python, os.X_OK):
        raise ServerFailedToStart(f"{server} needs {python}: run scripts/install_bench_servers.sh")
    return [python, "-m", "bench.serve_gateway", "--server", server]


async def start_gateway(variant: str, *, upstream_url: str, tmp: Path, log_dir: Path,
                        cores: frozenset[int] | None, postgres_dsn: str | None,
                        name: str | None = None) -> ServerProcess:
    """The gateway for one variant, healthy, or ServerFailedToStart."""
    if split_name(variant)[0] == "postgres" and not postgres_dsn:
        raise ServerFailedToStart("no PostgreSQL available (see the postgres variant's error)")
    port = free_port()
    env = gateway_env(variant, upstream_url=upstream_url, port=port, tmp=tmp,
                      postgres_dsn=postgres_dsn)
    return await start_server(name=name or f"gateway-{variant}", argv=gateway_argv(variant),
                              port=port, log_dir=log_dir, env=env, cores=cores, cwd=str(tmp),
                              startup_timeout=60)


async def start_reference_relay(*, upstream_url: str, log_dir: Path, cores: frozenset[int] | None,
                                name: str = BARE_RELAY) -> ServerProcess:
    """The bare aiohttp relay, pinned like the gateway."""
    port = free_port()
    argv = [PYTHON, "-m", "bench.relay_servers", "--client", "aiohttp",
            "--upstream", upstream_url, "--port", str(port)]
    return await start_server(name=name, argv=argv, port=port, log_dir=log_dir, cores=cores,
                              cwd=str(REPO_ROOT))


async def start_contender(name: str, *, upstream_url: str, tmp: Path,
                          cores: frozenset[int] | None, postgres_dsn: str | None,
                          process_name: str | None = None) -> ServerProcess:
    """Any contender by its name (see the module docstring)."""
    if name == BARE_RELAY:
        return await start_reference_relay(upstream_url=upstream_url, log_dir=tmp, cores=cores,
                                           name=process_name or name)
    if name == NGINX:
        return await start_nginx(upstream_url=upstream_url, log_dir=tmp, cores=cores,
                                 name=process_name or name)
    return await start_gateway(name, upstream_url=upstream_url, tmp=tmp, log_dir=tmp, cores=cores,
                               postgres_dsn=postgres_dsn, name=process_name)
