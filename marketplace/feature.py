"""The marketplace as a gateway feature: built from the public gateway API, found through its entry point.

``pyproject.toml`` names :class:`MarketplaceFeature` in the ``stack_gateway.features``
entry-point group; the gateway calls it with its ``gateway.api.Gateway`` at assembly. Its
router is the parts' routers, in an order that matters where two paths overlap: the search's
``/api/products/search``, ``/ai-search`` and ``/compare`` come before the catalogue's
``/api/products/{product_id}``, which would otherwise take them for a product id.
"""

from __future__ import annotations

from fastapi import APIRouter

from gateway.api import Gateway
from marketplace.catalogue.routes import router as catalogue_routes
from marketplace.chat.routes import router as chat_routes
from marketplace.lifecycle import Marketplace
from marketplace.places.routes import router as places_routes
from marketplace.search.routes import router as search_routes
from marketplace.settings import MarketplaceSettings
from marketplace.users.routes import router as users_routes

PARTS = (places_routes, search_routes, catalogue_routes, users_routes, chat_routes)


def marketplace_router() -> APIRouter:
    """Every route of the marketplace (each declared once, in its part's ``routes`` module), in one flat list.

    The parts' routes are taken over as they are (paths, route classes), not included: FastAPI
    would wrap an included router in a lazy node, and the gateway reads its features' routes
    (control requests, the route table) as plain ``APIRoute`` objects.
    """
    router = APIRouter()
    for part in PARTS:
        router.routes.extend(part.routes)
    return router


class MarketplaceFeature(Marketplace):
    settings_class = MarketplaceSettings

    def __init__(self, gateway: Gateway, settings: MarketplaceSettings | None = None) -> None:
        super().__init__(gateway, settings or MarketplaceSettings(), router=marketplace_router())
