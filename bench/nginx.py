"""nginx in front of the fake upstream: the compiled relay a Python gateway is compared with.

Debian's nginx (``scripts/install_nginx.sh``), one worker, the same job as the bare aiohttp
relay and the gateway: every POST goes to the upstream unchanged, its answer comes back as it
arrives. What makes it a fair reference rather than a crippled one:

- ``proxy_buffering off``: each piece of an event stream is written to the client as soon as
  it is read (no 4-8 KiB buffering that would hold a first token back);
- upstream keep-alive (``keepalive`` in the upstream block, HTTP/1.1 with the ``Connection``
  header cleared): without it nginx opens a new upstream connection per request, which costs
  the fake upstream's core, not nginx's, and makes nginx look slower than it is;
- keep-alive limits per connection raised on both sides (default 1,000 requests), so the
  benchmark never measures reconnections;
- no access log (the gateway and the bare relay write none either).

The server runs in the foreground (``daemon off``) under its own prefix in a temporary
directory: its master process is the process started, and its one worker is that process's
child, whose CPU time ``ServerProcess`` counts with it. ``/health`` is answered by nginx itself.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from urllib.parse import urlsplit

from bench.procs import ServerProcess, free_port, start_server

NGINX = os.environ.get("STACK_BENCH_NGINX", "/usr/sbin/nginx")
NAME = "nginx"
# More than any concurrency the benchmark uses (c256 plus the memory run's 1,000 streams,
# each holding a client and an upstream connection).
WORKER_CONNECTIONS = 8192
UPSTREAM_KEEPALIVE = 1024  # idle upstream connections kept per worker
MANY_REQUESTS = 10_000_000  # requests per keep-alive connection before nginx closes it


class NginxMissing(RuntimeError):
    """No nginx binary where the benchmark looks (install it: scripts/install_nginx.sh)."""


def nginx_binary() -> str:
    """The nginx to run, or NginxMissing naming the install script."""
    found = NGINX if os.access(NGINX, os.X_OK) else shutil.which("nginx")
    if not found:
        raise NginxMissing(f"nginx not found at {NGINX} nor on PATH: run scripts/install_nginx.sh "
                           "(or set STACK_BENCH_NGINX)")
    return found


def render_config(*, upstream_url: str, port: int, prefix: Path, single_process: bool = False) -> str:
    """nginx.conf for a one-worker relay on 127.0.0.1:``port`` to ``upstream_url``.

    ``single_process``: no master, the one process serves (``master_process off``), for
    counting its instructions under valgrind, whose control pipe a forked worker lacks; the
    request path is the same.
    """
    upstream = urlsplit(upstream_url)
    if upstream.scheme != "http" or not upstream.hostname or not upstream.port:
        raise ValueError(f"upstream must be http://host:port, got {upstream_url!r}")
    temp = {name: prefix / name for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")}
    return f"""\
worker_processes 1;
daemon off;
master_process {"off" if single_process else "on"};
pid {prefix}/nginx.pid;
error_log stderr warn;

events {{
    worker_connections {WORKER_CONNECTIONS};
    multi_accept on;
}}

http {{
    access_log off;
    server_tokens off;
    client_body_temp_path {temp['client_body']};
    proxy_temp_path {temp['proxy']};
    fastcgi_temp_path {temp['fastcgi']};
    uwsgi_temp_path {temp['uwsgi']};
    scgi_temp_path {temp['scgi']};
    keepalive_requests {MANY_REQUESTS};
    keepalive_timeout 75s;
    client_max_body_size 16m;

    upstream engine {{
        server {upstream.hostname}:{upstream.port};
        keepalive {UPSTREAM_KEEPALIVE};
        keepalive_requests {MANY_REQUESTS};
        keepalive_timeout 60s;
    }}

    server {{
        listen 127.0.0.1:{port} backlog=4096;

        location = /health {{
            return 200 "";
        }}

        location / {{
            proxy_pass http://engine;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 300s;
            proxy_send_timeout 300s;
        }}
    }}
}}
"""


async def start_nginx(*, upstream_url: str, log_dir: Path, cores: frozenset[int] | None,
                      name: str = NAME) -> ServerProcess:
    """nginx relaying to ``upstream_url``, pinned to ``cores`` (its worker inherits them), healthy."""
    binary = nginx_binary()
    port = free_port()
    prefix = log_dir / f"{name}-{port}"
    prefix.mkdir(parents=True, exist_ok=True)
    config = prefix / "nginx.conf"
    config.write_text(render_config(upstream_url=upstream_url, port=port, prefix=prefix))
    # -e: the error log before the configuration is read (the default path may not be writable).
    argv = [binary, "-p", str(prefix), "-c", str(config), "-e", "stderr"]
    return await start_server(name=name, argv=argv, port=port, log_dir=log_dir, cores=cores,
                              cwd=str(prefix))
