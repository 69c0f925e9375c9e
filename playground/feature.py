"""The playground page as a gateway feature, found through its entry point.

``pyproject.toml`` names :class:`PlaygroundFeature` in the ``stack_gateway.features``
entry-point group; the gateway calls it with its ``gateway.api.Gateway`` at assembly and keeps
it on ``app.state.playground``, where the routes find the page's files.
"""

from __future__ import annotations

import logging

from gateway.api import Gateway
from playground.assets import Asset, load_assets
from playground.routes import BASE_PATH, PUBLIC_PATHS, router
from playground.settings import PlaygroundSettings

log = logging.getLogger("playground")


class PlaygroundFeature:
    name = "playground"
    settings_class = PlaygroundSettings
    public_paths = PUBLIC_PATHS  # the page's files need no key: it must load before it can ask for one

    def __init__(self, gateway: Gateway, settings: PlaygroundSettings | None = None) -> None:
        self.gateway = gateway
        self.settings = settings or PlaygroundSettings()
        self.router = router
        self.assets: dict[str, Asset] | None = None  # None: the page is not served (404)

    async def start(self) -> None:
        """Read the page's files when ``PLAYGROUND`` serves the page on this gateway's host."""
        host = self.gateway.settings.host
        if not self.settings.serves_page(host=host):
            return
        self.assets = load_assets()
        shown = f"[{host}]" if ":" in host else host  # an IPv6 literal
        log.info("playground page served", extra={"url": f"http://{shown}:{self.gateway.settings.port}{BASE_PATH}/"})

    async def stop(self) -> None:
        self.assets = None

    def status(self) -> dict:
        return {"ready": True, "served": self.assets is not None}
