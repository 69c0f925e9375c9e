"""The marketplace as a gateway feature: built from the public gateway API, found through its entry point.

``pyproject.toml`` names :class:`MarketplaceFeature` in the ``stack_gateway.features``
entry-point group; the gateway calls it with its ``gateway.api.Gateway`` at assembly.
"""

from __future__ import annotations

from gateway.api import Gateway
from marketplace.lifecycle import Marketplace
from marketplace.routes import router
from marketplace.settings import MarketplaceSettings


class MarketplaceFeature(Marketplace):
    settings_class = MarketplaceSettings

    def __init__(self, gateway: Gateway, settings: MarketplaceSettings | None = None) -> None:
        super().__init__(gateway, settings or MarketplaceSettings(), router=router)
