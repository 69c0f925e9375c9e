"""The gateway app served by another ASGI server, for bench.run's side-by-side comparison.

    python -m bench.serve_gateway --server granian      # settings from the environment, as `python -m gateway`

The app is the product's own (``gateway.app:create_served_app``, same settings, same frozen
heap); only the server around it changes, configured as ``gateway/cli.py`` configures uvicorn
wherever the other server has an equivalent (one process, uvloop, no access log, no server
header, keep-alive 75 s, the graceful-shutdown period, the connection bound). What has no
equivalent is named in ``SERVERS`` and in docs/benchmarks.md. ``uvicorn`` here is today's server
(``gateway.cli.main`` itself); bench.run starts it as ``python -m gateway``.

granian, hypercorn and socketify live in their own environment (scripts/install_bench_servers.sh),
which sees the gateway environment's packages behind its own.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

APP = "gateway.app:create_served_app"
KEEP_ALIVE_SECONDS = 75  # as gateway/cli.py


@dataclass(frozen=True)
class ServerChoice:
    """One way to serve the app: how bench.run names it, and what it cannot carry over."""

    name: str
    description: str
    needs_servers_env: bool  # granian, hypercorn, socketify: scripts/install_bench_servers.sh
    gaps: str  # settings of gateway/cli.py with no equivalent here


SERVERS = {
    "uvicorn": ServerChoice("uvicorn", "uvicorn, httptools + uvloop (today)", False, ""),
    "uvicorn-h11": ServerChoice("uvicorn-h11", "uvicorn, h11 + uvloop", False, ""),
    "granian": ServerChoice(
        "granian", "granian (Rust, hyper + tokio), ASGI, uvloop", True,
        "MAX_CONNECTIONS becomes granian's backpressure (requests in flight per worker; "
        "excess connections wait in the backlog instead of getting uvicorn's 503)"),
    "hypercorn": ServerChoice(
        "hypercorn", "hypercorn (h11), uvloop", True,
        "no bound on connections (MAX_CONNECTIONS is not applied)"),
    "socketify": ServerChoice(
        "socketify", "socketify (uWebSockets, libuv), ASGI", True,
        "no bound on connections (MAX_CONNECTIONS is not applied); no graceful-shutdown period"),
}


def serve_uvicorn(settings, *, http: str) -> None:
    import uvicorn

    uvicorn.run(APP, factory=True, host=settings.host, port=settings.port, workers=settings.workers,
                loop="uvloop", http=http, log_config=None, access_log=False,
                timeout_keep_alive=KEEP_ALIVE_SECONDS, proxy_headers=False, server_header=False,
                timeout_graceful_shutdown=settings.graceful_shutdown_seconds,
                limit_concurrency=settings.max_connections)


def serve_granian(settings) -> None:
    from granian.constants import HTTPModes, Interfaces, Loops
    from granian.http import HTTP1Settings
    from granian.server import Server

    Server(APP, factory=True, address=settings.host, port=settings.port,
           interface=Interfaces.ASGI, workers=settings.workers, loop=Loops.uvloop,
           http=HTTPModes.http1, websockets=False, log_access=False,
           backpressure=settings.max_connections,
           http1_settings=HTTP1Settings(keep_alive=True),
           workers_kill_timeout=int(settings.graceful_shutdown_seconds) or None).serve()


def serve_hypercorn(settings) -> None:
    import uvloop
    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    from gateway.app import create_served_app

    config = Config()
    config.bind = [f"{settings.host}:{settings.port}"]
    config.accesslog = None
    config.include_server_header = False
    config.keep_alive_timeout = KEEP_ALIVE_SECONDS
    config.graceful_timeout = settings.graceful_shutdown_seconds
    uvloop.run(serve(create_served_app(), config))


def serve_socketify(settings) -> None:
    from socketify import ASGI, AppListenOptions

    from gateway.app import create_served_app

    ASGI(create_served_app(), lifespan=True).listen(
        AppListenOptions(port=settings.port, host=settings.host), lambda _config: None).run()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", choices=sorted(SERVERS), required=True)
    args = parser.parse_args(argv)
    from gateway.config import Settings
    from gateway.http.logs import configure_logging

    settings = Settings()
    configure_logging(settings.log_level)
    if args.server == "uvicorn":
        from gateway.cli import main as gateway_main

        gateway_main()
    elif args.server == "uvicorn-h11":
        serve_uvicorn(settings, http="h11")
    elif args.server == "granian":
        serve_granian(settings)
    elif args.server == "hypercorn":
        serve_hypercorn(settings)
    else:
        serve_socketify(settings)


if __name__ == "__main__":
    main()
