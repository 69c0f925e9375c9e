"""``stack-gateway``: serve the gateway with uvicorn (uvloop + httptools).

Settings come from the environment (see the README's configuration table).
Without any API key the gateway refuses to listen beyond loopback: it binds
127.0.0.1 and says so at start-up.
"""

from __future__ import annotations

import logging

import uvicorn

from gateway.config import Settings
from gateway.http.logs import configure_logging
from gateway.http.request_head import BoundedHttpToolsProtocol

log = logging.getLogger("gateway.cli")


def main() -> None:
    settings = Settings()
    configure_logging(settings.log_level)
    if settings.unsafe_host_refused:
        log.warning(
            "no API key configured: refusing to listen on %s, binding 127.0.0.1 only "
            "(set API_KEYS or ADMIN_API_KEYS to serve other hosts)",
            settings.unsafe_host_refused,
        )
    elif not settings.auth_enabled:
        log.warning("no API key configured: authentication is off; listening on loopback only")
    if settings.cors_origins and not settings.auth_enabled:
        # Without keys (loopback only), a page allowed by CORS_ORIGINS and opened in a browser on
        # this machine needs nothing more to use the gateway; with "*", any page can.
        log.warning("CORS_ORIGINS is set but no API key is: pages of %s opened on this machine can use the "
                    "gateway without a key", ", ".join(settings.cors_origins))
    uvicorn.run(
        "gateway.app:create_served_app",
        factory=True,
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
