"""What the parts' routes reach on the running feature: one tiny getter each.

The gateway keeps the feature object (``marketplace.lifecycle.Marketplace``) on
``app.state.marketplace`` (vLLM keeps its handlers on ``app.state`` the same way). A route asks
for the piece it needs (the gateway, the settings, the database, the gazetteer, the cursor
signer) through a dependency, never for the whole feature, so no part imports the module that
assembles them all. The attribute names read here are the feature's, listed in its class.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request

from gateway.api import Gateway
from marketplace.settings import MarketplaceSettings


def feature_of(request: Request) -> Any:
    """The running marketplace feature (``marketplace.lifecycle.Marketplace``)."""
    return request.app.state.marketplace


async def get_gateway(request: Request) -> Gateway:
    return feature_of(request).gateway


async def get_settings(request: Request) -> MarketplaceSettings:
    return feature_of(request).settings


GatewayDep = Annotated[Gateway, Depends(get_gateway)]
SettingsDep = Annotated[MarketplaceSettings, Depends(get_settings)]
