"""``stack-gateway``: serve the gateway with uvicorn (uvloop + httptools).

Settings come from the environment (see the README's configuration table).
Without any API key the gateway refuses to listen beyond loopback: it binds
127.0.0.1 and says so at start-up.

A setting the gateway cannot run with (of the gateway or of a feature, ``FEATURES``, an
engine or database URL) is refused before anything listens: one JSON line naming the
variable and the reason, never the value, and exit code 2 (``REFUSED``). The app is built
here, in the process that starts uvicorn, so nothing is refused later inside a worker: there
it was a traceback, and with ``WORKERS`` > 1 a worker uvicorn started again and again while
the bound port answered nothing (a failing app factory exits 1, which uvicorn's supervisor
restarts; only exit code 3 stops it). With one worker the app built here is the one served.
"""

from __future__ import annotations

import logging
import sys

import uvicorn
from pydantic import ValidationError

from gateway.app import configure_served_process, create_app
from gateway.config import Settings
from gateway.http.logs import configure_logging
from gateway.http.request_head import BoundedHttpToolsProtocol

log = logging.getLogger("gateway.cli")

REFUSED = 2  # the exit code of a gateway that refused its settings


def refusal(error: ValueError) -> str:
    """What is wrong with the settings, each setting by its variable's name; never a value given."""
    if not isinstance(error, ValidationError):
        return str(error)
    problems = []
    for item in error.errors(include_url=False, include_input=False, include_context=False):
        message = item["msg"].removeprefix("Value error, ")
        name = str(item["loc"][0]).upper() if item["loc"] else ""
        problems.append(f"{name}: {message}" if name and not message.startswith(name) else message)
    return "; ".join(problems)


def start_warnings(settings: Settings) -> list[str]:
    """What the gateway accepts but its operator should hear about at start."""
    warnings = []
    if settings.unsafe_host_refused:
        warnings.append(f"no API key configured: refusing to listen on {settings.unsafe_host_refused}, binding "
                        "127.0.0.1 only (set API_KEYS or ADMIN_API_KEYS to serve other hosts)")
    elif not settings.auth_enabled:
        warnings.append("no API key configured: authentication is off; listening on loopback only")
    if settings.cors_origins and not settings.auth_enabled:
        # Without keys (loopback only), a page allowed by CORS_ORIGINS and opened in a browser on
        # this machine needs nothing more to use the gateway; with "*", any page can.
        warnings.append(f"CORS_ORIGINS is set but no API key is: pages of {', '.join(settings.cors_origins)} opened "
                        "on this machine can use the gateway without a key")
    if settings.workers > 1 and settings.session_store in ("memory", "off"):
        # Each worker keeps its own: a later request reaches the worker that holds the data one time in WORKERS.
        what = "sessions and stored responses" if settings.session_store == "memory" else "stored responses"
        warnings.append(f"SESSION_STORE={settings.session_store} with WORKERS={settings.workers}: each worker keeps "
                        f"its own {what} in memory, so a resume, GET /v1/responses/{{id}} or previous_response_id "
                        "that reaches another worker gets 404; use SESSION_STORE=sqlite (one host) or postgres")
    return warnings


def main() -> None:
    configure_logging()  # until LOG_LEVEL is read: a refused setting is logged like everything else
    try:
        settings = Settings()
        configure_served_process(settings)  # (the workers of WORKERS > 1 do it again: create_served_app)
        # Every other refusal: a feature's settings, FEATURES, the engines' and databases' URLs.
        app = create_app(settings, freeze_heap_when_started=True)
    except ValueError as refused:  # (pydantic's ValidationError is one)
        log.error("refusing to start: %s", refusal(refused))
        sys.exit(REFUSED)
    for warning in start_warnings(settings):
        log.warning(warning)
    # Several workers (or reload) need the factory: each process builds its own app.
    one_process = settings.workers == 1 and not settings.reload
    uvicorn.run(
        app if one_process else "gateway.app:create_served_app",
        factory=not one_process,
        host=settings.host,
        port=settings.port,
        reload=settings.reload,
        workers=None if settings.reload else settings.workers,
        loop="uvloop",
        # httptools, with bounds on the request head's size and time (REQUEST_HEAD_*), which
        # create_served_app sets in each serving process.
        http=BoundedHttpToolsProtocol,
        log_config=None,
        access_log=False,
        timeout_keep_alive=75,  # longer than typical client/proxy idle timeouts
        # No X-Forwarded-* rewriting: the gateway logs no client addresses, and the
        # middleware uvicorn adds for it costs time on every request.
        proxy_headers=False,
        server_header=False,
        timeout_graceful_shutdown=settings.graceful_shutdown_seconds,
        # The last bound, below admission control: past this many open connections (or
        # requests being served) uvicorn answers 503 itself, so a flood of idle or slow
        # connections cannot exhaust memory or file descriptors.
        limit_concurrency=settings.max_connections,
    )


if __name__ == "__main__":
    main()
