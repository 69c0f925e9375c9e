"""Features: packages that plug into the gateway, found through Python entry points.

The gateway never imports a feature. A feature package declares itself in its
``pyproject.toml``::

    [project.entry-points."stack_gateway.features"]
    marketplace = "marketplace.feature:MarketplaceFeature"

where the named factory, called with a ``gateway.api.Gateway``, builds a
``gateway.api.Feature`` from the small public API in ``gateway.api`` (the way pytest and
vLLM load their plugins).
``FEATURES`` picks which installed features run (default: all of them).
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points

from gateway.api import Feature, Gateway

ENTRY_POINT_GROUP = "stack_gateway.features"

FeatureFactory = Callable[[Gateway], Feature]


def installed_features() -> dict[str, FeatureFactory]:
    """Every feature the installed packages declare, by name."""
    return {point.name: point.load() for point in entry_points(group=ENTRY_POINT_GROUP)}


def settings_classes() -> list[type]:
    """The gateway's settings class and every installed feature's: every variable any of them reads."""
    from gateway.config import Settings

    return [Settings, *(factory.settings_class for factory in installed_features().values()
                        if getattr(factory, "settings_class", None) is not None)]


def selected(wanted: list[str], available: dict[str, FeatureFactory]) -> dict[str, FeatureFactory]:
    """The features ``FEATURES`` asks for: ``all`` (default), ``none``, or names (unknown names refused)."""
    if wanted in ([], ["all"]):
        return available
    if wanted == ["none"]:
        return {}
    unknown = [name for name in wanted if name not in available]
    if unknown:
        raise ValueError(f"FEATURES names {', '.join(unknown)}, which no installed package provides "
                         f"(installed: {', '.join(sorted(available)) or 'none'})")
    return {name: available[name] for name in wanted}
